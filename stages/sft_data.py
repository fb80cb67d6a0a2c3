"""DVC stage `sft_data`: verified multi-turn oracle trajectories for the SFT warm-up.

    python -m stages.sft_data               (params: seed, sft_data, env)

Reads data/questions/train.jsonl and data/databases/. Outs: data/sft/train.jsonl (one record per kept
trajectory: id, db_id, hardness, kind, messages, tools, mistakes) and reports/sft_data/metrics.json (counts by kind
and hardness, drops by reason). Every trajectory is played through the real environment and accepted by
the verifier; see `sqlenv.data.sft_data` for the seven kinds.
"""

from __future__ import annotations

import logging
import time

import mlflow
import pandas as pd

from pipeline import machine, paths
from pipeline.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from pipeline.params import load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import log_metrics, stage_run
from sqlenv.data.sft_data import KINDS, SFTDataConfig, build_sft_data, summarize
from sqlenv.env.environment import EnvConfig, close_shared_sandboxes
from sqlenv.types import Question

STAGE = "sft_data"
OUT = paths.SFT_DATA / "train.jsonl"
log = logging.getLogger(STAGE)


def main() -> None:
    params = load_params()
    read = section_dict(params, "seed", "sft_data", "env")
    with stage_run(STAGE, read):
        start = time.perf_counter()
        questions = [Question.from_dict(r) for r in read_jsonl(paths.questions_file("train"))]
        config = SFTDataConfig(**read["sft_data"], seed=params.seed)
        result = build_sft_data(questions, paths.DATABASES, EnvConfig.from_dict(read["env"]), config)
        close_shared_sandboxes()
        if not result.records:
            raise ValueError(f"no trajectory survived verification ({result.drop_counts}); nothing to train on")
        atomic_write_jsonl(OUT, result.records)

        metrics = summarize(result, candidates=len(questions))
        metrics.update(wall_time_s=round(time.perf_counter() - start, 1), system=machine.summary())
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        log_metrics({k: metrics[k] for k in ("candidates", "kept", "keep_rate", "by_kind", "by_hardness", "dropped")})
        mlflow.log_metrics({f"unavailable/{kind}": n for kind, n in metrics["unavailable"].items()})
        mlflow.log_dict(metrics, "metrics.json")
        if result.dropped:
            mlflow.log_dict({qid: reason for qid, reason in result.dropped}, "dropped.json")
        examples = [next((r for r in result.records if r["kind"] == kind), None) for kind in KINDS]
        rows = [{"id": r["id"], "kind": r["kind"], "hardness": r["hardness"], "messages": r["messages"]} for r in examples if r]
        mlflow.log_table(pd.DataFrame(rows).astype(str), artifact_file="trajectory_examples.json")
        log.info(
            "%d/%d trajectories kept (%s), dropped %s",
            metrics["kept"], metrics["candidates"], metrics["by_kind"], metrics["dropped"] or "none",
        )


if __name__ == "__main__":
    run_stage(STAGE, main)
