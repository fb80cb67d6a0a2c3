"""DVC stage `sft`: multi-turn SFT warm-up of the base model on the verified trajectories.

    python -m stages.sft                    (params: seed, sft, model.dtype, launch)

Reads data/sft/train.jsonl and models/base/. Outs: models/sft/ (the merged model only; the trainer's
output_dir is checkpoints/sft/, outside every DVC out), reports/sft/metrics.json, reports/sft/loss.csv
(DVC plots). How the saved model plays is the evaluation's to say (`evaluate@sft_n200` loads it from
disk), so training never touches an evaluation question. With `launch.num_processes > 1` it runs under
`accelerate launch` (`pipeline.launch`): every process trains, the main one writes the outs and MLflow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

import mlflow
import pandas as pd

from pipeline import machine, paths
from pipeline.io import atomic_dir, atomic_write_json, atomic_write_text, read_jsonl
from pipeline.launch import main_stage_run, run_training_stage
from pipeline.params import load_params, section_dict
from pipeline.tracking import log_dtype, log_metrics
from sqlenv.dtype import choose_dtype
from sqlenv.train.processes import is_main_process, world_size
from sqlenv.train.sft import TrainConfig, train_sft

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
    read = section_dict(params, "seed", "sft", "launch")
    read["model"] = {"dtype": params.model.dtype}
    read["env"] = {"schema": params.env.schema, "answer": params.env.answer}  # the mode of its data: run tags
    with main_stage_run(STAGE, read) as run:
        t0 = time.monotonic()
        if not (BASE / "config.json").is_file():
            raise FileNotFoundError(f"base model not found: {BASE} (run the prepare_model stage)")
        records = read_jsonl(paths.SFT_DATA / "train.jsonl")
        dtype = choose_dtype(params.model.dtype, BASE)
        config = TrainConfig.from_params(read["sft"], seed=params.seed, dtype=dtype.dtype, report_to=("mlflow",))
        if not is_main_process():  # trains alongside the main process, which saves and logs
            train_sft(records, BASE, None, config, output_dir=paths.CHECKPOINTS / STAGE)
            return
        with atomic_dir(OUT) as tmp, trainer_logs_into_active_run():
            result = train_sft(records, BASE, tmp, config, output_dir=paths.CHECKPOINTS / STAGE)
        if mlflow.active_run() is None or mlflow.active_run().info.run_id != run.info.run_id:
            raise RuntimeError("the trainer's MLflow callback ended or replaced the stage's run")
        curve = pd.DataFrame(result.curve)
        atomic_write_text(paths.report_dir(STAGE) / "loss.csv", curve.to_csv(index=False))
        train_s = time.monotonic() - t0

        metrics = {**result.metrics(), "processes": world_size(), "wall_time_s": round(train_s, 1),
                   "dtype": dtype.as_dict(), "system": machine.summary()}  # fmt: skip
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        log_dtype(dtype)
        mlflow.set_tag("activation_checkpointing", metrics["activation_checkpointing"])
        log_metrics({k: metrics[k] for k in ("dataset", "steps", "seconds_per_step", "train_wall_s")}, prefix="sft/")
        mlflow.log_metric("wall_time_s", metrics["wall_time_s"])
        mlflow.set_tag("model_fingerprint", metrics["fingerprint"])
        mlflow.log_dict(metrics, "metrics.json")
        log.info("%d examples, %d steps, loss %.4f, %.1f s/step", result.dataset.examples, result.steps,
                 result.train_loss, result.seconds_per_step)


if __name__ == "__main__":
    run_training_stage(STAGE, "stages.sft", main)
