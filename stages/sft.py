"""DVC stage `sft`: multi-turn SFT warm-up of the base model on the verified trajectories.

    python -m stages.sft                    (params: seed, sft, env, model.dtype)

Reads data/sft/train.jsonl, models/base/, data/questions/n50.jsonl, data/databases/. Outs: models/sft/
(the merged model only; the trainer's output_dir is checkpoints/sft/, outside every DVC out),
reports/sft/metrics.json, reports/sft/loss.csv (DVC plots). After saving, the model is loaded back
from disk and plays `sft.post_check_episodes` n50 questions greedily; parse rate and accuracy go into the
metrics, the transcripts into MLflow (JSONL artifact + table).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator

import mlflow
import pandas as pd

from pipeline import paths
from pipeline.io import atomic_dir, atomic_write_json, atomic_write_text, read_jsonl
from pipeline.params import load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import log_metrics, stage_run
from sqlenv.environment import EnvConfig, close_shared_sandboxes
from sqlenv.evaluation import episode_metrics
from sqlenv.sft import TrainConfig, post_check, post_check_questions, train_sft
from sqlenv.types import Question

STAGE = "sft"
BASE = paths.MODELS / "base"
OUT = paths.MODELS / "sft"
log = logging.getLogger(STAGE)


@contextlib.contextmanager
def trainer_logs_into_active_run() -> Iterator[None]:
    """Hide MLFLOW_RUN_ID from transformers' MLflowCallback while the stage's run is active.

    With MLFLOW_RUN_ID set the callback calls `mlflow.start_run()` even though a run is active, which
    raises ("Run ... is already active"); without it, the callback sees the active run, logs into it and
    leaves it open (it only ends runs it started).
    """
    saved = os.environ.pop("MLFLOW_RUN_ID", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MLFLOW_RUN_ID"] = saved


def main() -> None:
    params = load_params()
    read = section_dict(params, "seed", "sft", "env")
    read["model"] = {"dtype": params.model.dtype}
    with stage_run(STAGE, read) as run:
        t0 = time.monotonic()
        if not (BASE / "config.json").is_file():
            raise FileNotFoundError(f"base model not found: {BASE} (run the prepare_model stage)")
        records = read_jsonl(paths.SFT_DATA / "train.jsonl")
        config = TrainConfig.from_params(read["sft"], seed=params.seed, dtype=params.model.dtype, report_to=("mlflow",))
        with atomic_dir(OUT) as tmp, trainer_logs_into_active_run():
            result = train_sft(records, BASE, tmp, config, output_dir=paths.CHECKPOINTS / STAGE)
        if mlflow.active_run() is None or mlflow.active_run().info.run_id != run.info.run_id:
            raise RuntimeError("the trainer's MLflow callback ended or replaced the stage's run")
        curve = pd.DataFrame(result.curve)
        atomic_write_text(paths.report_dir(STAGE) / "loss.csv", curve.to_csv(index=False))
        train_s = time.monotonic() - t0

        env_config = EnvConfig.from_dict(read["env"])
        n50 = [Question.from_dict(r) for r in read_jsonl(paths.questions_file("n50"))]
        questions = post_check_questions(n50, params.sft.post_check_episodes, params.seed)
        t1 = time.monotonic()
        episodes = (
            post_check(OUT, questions, db_dir=paths.DATABASES, env_config=env_config,
                       max_total_tokens=params.sft.post_check_max_tokens)
            if questions
            else []
        )
        close_shared_sandboxes()
        check = episode_metrics(episodes) if episodes else {"n": 0}
        metrics = {
            **result.metrics(),
            "post_check": {k: check.get(k) for k in ("n", "accuracy", "parse_rate", "answered_rate",
                                                    "calls_after_answer_rate", "steps_mean", "tokens_mean")},
            "wall_s": {"train_and_save": round(train_s, 1), "post_check": round(time.monotonic() - t1, 1)},
        }
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        log_metrics({k: metrics[k] for k in ("dataset", "steps", "step_s", "train_wall_s")}, prefix="sft/")
        log_metrics(metrics["post_check"], prefix="post_check/")
        log_metrics(metrics["wall_s"], prefix="wall_s/")
        mlflow.set_tag("model_fingerprint", metrics["fingerprint"])
        mlflow.log_dict(metrics, "metrics.json")
        if episodes:
            rows = [r.to_dict() for r in episodes]
            mlflow.log_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "post_check_samples.jsonl")
            table = pd.DataFrame(rows)[["question_id", "hardness", "correct", "answer", "steps", "parse_failures", "messages"]]
            mlflow.log_table(table.astype(str), artifact_file="post_check_samples.json")
        log.info(
            "%d examples, %d steps, loss %.4f, %.1f s/step; post-check on %d n50 questions: parse rate %s, accuracy %s",
            result.dataset.examples, result.steps, result.train_loss, result.step_s, check["n"],
            check.get("parse_rate"), check.get("accuracy"),
        )


if __name__ == "__main__":
    run_stage(STAGE, main)
