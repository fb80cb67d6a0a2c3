"""DVC stage `prepare`: build the question sets and databases every later stage reads.

    python -m stages.prepare            (params: seed, data, world, env.sql_timeout_s)

Outs: data/databases/<db>/<db>.sqlite, data/questions/{train,n50,n200,indomain}.jsonl (indomain: the in-domain
probe, `data.indomain` training-domain questions taken out of train; empty when 0),
reports/prepare/metrics.json. Every question that reaches an out has been played by the
oracle through the real environment and accepted by the verifier.
"""

from __future__ import annotations

import logging
import time

import mlflow
import pandas as pd

from pipeline import machine, paths
from pipeline.io import atomic_dir, atomic_write_json, atomic_write_jsonl
from pipeline.params import load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import log_metrics, stage_run
from sqlenv.data.questions import build_questions, questions_summary
from sqlenv.data.splits import split_by_file, split_questions

STAGE = "prepare"
log = logging.getLogger(STAGE)


def main() -> None:
    params = load_params()
    read = section_dict(params, "seed", "data", "world")
    read["env"] = {"sql_timeout_s": params.env.sql_timeout_s}
    by_file = params.data.split == "by_file"
    if by_file and not (params.data.source == "spider" and params.data.spider_train_questions):
        raise ValueError("data.split: by_file needs data.source: spider and data.spider_train_questions (Spider's protocol)")
    with stage_run(STAGE, read):
        start = time.perf_counter()
        with atomic_dir(paths.DATABASES) as db_tmp, atomic_dir(paths.QUESTIONS) as q_tmp:
            built = build_questions(
                db_tmp,
                seed=params.seed,
                source=params.data.source,
                spider_dir=params.data.spider_dir,
                spider_questions=params.data.spider_questions,
                spider_train_questions=params.data.spider_train_questions if by_file else (),
                databases=params.data.databases,
                difficulties=params.data.difficulties,
                domains=params.world.domains,
                databases_per_domain=params.world.databases_per_domain,
                questions_per_db=params.world.questions_per_db,
                side_tables=params.world.side_tables,
                renamed_columns=params.world.renamed_columns,
                sql_timeout_s=params.env.sql_timeout_s,
            )
            if by_file:  # Spider's protocol: training files -> train, the questions file -> evaluation
                split = split_by_file(built.train_questions, built.questions, seed=params.seed,
                                      n50=params.data.n50, n200=params.data.n200, indomain=params.data.indomain)  # fmt: skip
            else:
                split = split_questions(
                    built.questions,
                    seed=params.seed,
                    mode=params.data.split,
                    eval_fraction=params.data.eval_fraction,
                    n50=params.data.n50,
                    n200=params.data.n200,
                    indomain=params.data.indomain,
                )
            sets = {"train": split.train, "n50": split.n50, "n200": split.n200, "indomain": split.indomain}
            for name, qs in sets.items():
                atomic_write_jsonl(q_tmp / f"{name}.jsonl", [q.to_dict() for q in qs])

        metrics = {
            "source": params.data.source,
            "candidates": built.candidates,
            "verified": len(built.questions),
            "oracle_verification_rate": built.verification_rate,
            "dropped": built.drop_counts,
            "splits": {name: questions_summary(qs) for name, qs in sets.items()},
            "indomain_requested": params.data.indomain,  # the probe is at most a quarter of the training side
            "eval_pool": questions_summary(split.eval_pool),
            "split": params.data.split,
            "domains": {"train": split.train_domains, "eval": split.eval_domains},
            "databases": {"train": split.train_databases, "eval": split.eval_databases},
            "wall_time_s": round(time.perf_counter() - start, 1),
            "system": machine.summary(),
        }
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        log_metrics({k: metrics[k] for k in ("candidates", "verified", "oracle_verification_rate", "dropped", "splits")})
        mlflow.log_dict(metrics, "metrics.json")
        sample = [q.to_dict() for q in _sample_per_hardness(split.train + split.eval_pool, per_level=5)]
        if sample:
            mlflow.log_table(pd.DataFrame(sample).astype(str), artifact_file="questions_sample.json")
        if len(split.indomain) < params.data.indomain:
            log.warning("data.indomain %d: the in-domain probe holds %d questions, a quarter of the training side",
                        params.data.indomain, len(split.indomain))  # fmt: skip
        log.info(
            "%d questions (%d candidates, verification rate %.4f): train %d, n50 %d, n200 %d, in-domain probe %d",
            len(built.questions), built.candidates, built.verification_rate,
            len(split.train), len(split.n50), len(split.n200), len(split.indomain),
        )


def _sample_per_hardness(questions, per_level: int):
    by_level: dict[str, list] = {}
    for q in sorted(questions, key=lambda q: q.id):
        by_level.setdefault(q.hardness, []).append(q)
    return [q for level in sorted(by_level) for q in by_level[level][:per_level]]


if __name__ == "__main__":
    run_stage(STAGE, main)
