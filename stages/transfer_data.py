"""DVC stage `transfer_data`: the transfer set — real databases the training never saw — as a DVC out.

    python -m stages.transfer_data      (params: seed, transfer, env.sql_timeout_s)

Reads `transfer.spider_dir` (a Spider-format folder, outside the repository) and the committed ids file
(`transfer.ids`), and writes data/transfer/{questions.jsonl, databases/, manifest.json}
(`sqlenv.eval.transfer.prepare_transfer`) and reports/transfer_data/metrics.json. The folder is no DVC
dependency (DVC stops on a missing one), so the stage is `always_changed`: it runs on every `dvc repro`
(a second or two) and the transfer evaluations downstream rerun only when what it wrote changed — the
folder appeared, vanished, or its questions or databases changed. Where the folder is missing, the
manifest and the metrics say "skipped: no transfer data at <path>" and the run goes on.
"""

from __future__ import annotations

import logging

import mlflow

from pipeline import paths
from pipeline.io import atomic_dir, atomic_write_json
from pipeline.params import load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import stage_run
from sqlenv.eval.transfer import prepare_transfer, read_ids

STAGE = "transfer_data"
log = logging.getLogger(STAGE)


def main() -> None:
    params = load_params()
    tr = params.transfer
    read = section_dict(params, "seed", "transfer")
    read["env"] = {"sql_timeout_s": params.env.sql_timeout_s}
    ids = read_ids(tr.ids) if tr.ids else None  # a bad ids file is bad input: before the run opens
    with stage_run(STAGE, read):
        with atomic_dir(paths.TRANSFER) as tmp:
            manifest = prepare_transfer(tr.spider_dir, tmp, questions_file=tr.questions_file, ids=ids, n=tr.n,
                                        seed=params.seed, limit=tr.limit, sql_timeout_s=params.env.sql_timeout_s)  # fmt: skip
        metrics = {k: manifest[k] for k in ("skipped", "n", "pool", "hardness", "missing_keys", "dropped_by_gate")
                   if k in manifest}  # fmt: skip
        metrics["spider_dir"] = tr.spider_dir
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        mlflow.log_dict(manifest, "manifest.json")
        if "skipped" in manifest:
            mlflow.set_tag("skipped", manifest["skipped"])
            log.warning("skipped: %s", manifest["skipped"])
        else:
            mlflow.log_metrics({"n": manifest["n"], "missing_keys": len(manifest["missing_keys"])})
            log.info("%d transfer questions from %s (%d committed keys not found)", manifest["n"], tr.spider_dir,
                     len(manifest["missing_keys"]))


if __name__ == "__main__":
    run_stage(STAGE, main)
