"""GRPO training → the stage's MLflow run: every logged step's metrics, and sampled transcripts.

Why our own callback and `report_to="none"`: transformers' `MLflowCallback` calls
`mlflow.start_run()` whenever `MLFLOW_RUN_ID` is set — which `stage_run` sets, with that run already
active — and MLflow refuses to start a run while one is active ("Run ... is already active"); it
also ends the run it believes it started at `on_train_end`, and logs asynchronously. So this
callback logs TRL's own log entries (`loss`, `reward`, `reward_std`, `frac_reward_zero_std`, `kl`,
`entropy`, `rewards/<component>/mean|std`, `tools/call_frequency`, `tools/failure_frequency`, ...
and the `episode/*` diagnostics that `sqlenv.train.grpo` reports through TRL's `log_metric`) into the
active run, synchronously, at `step = global_step`, with names sanitised to what MLflow accepts.

Every `transcripts_every` steps it logs a sample of the latest generation batch's episodes (full
messages, reward components, advantage, verdict) as `transcripts/step_NNNNN.jsonl` and appends them
to the MLflow table `transcripts.json` (TRL's own completion logging never reaches MLflow), and logs each
of them as an MLflow trace (`pipeline.results.log_trace`: a TOOL span per call, the reward as an assessment).

On a resumed run (a new MLflow run: params can't change inside one, and the old one was killed),
the restored `log_history` up to the checkpoint is replayed first, so the new run's curves cover
every step; the run is tagged `resumed_from_step`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import mlflow
import pandas as pd
from transformers import TrainerCallback

from pipeline.results import log_feedback, log_trace
from sqlenv.train.grpo_outputs import render_transcript, sample_transcripts

_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. /]")


def metric_name(key: str) -> str:
    """An MLflow-valid metric name: letters, digits and `_ - . / space` kept, anything else -> `_`."""
    return _BAD_CHARS.sub("_", key)


def numeric_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a log entry under sanitised names (None, NaN, text and `step` dropped)."""
    out = {}
    for key, value in logs.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(float(value)):
            out[metric_name(key)] = float(value)
    return out


class MLflowGRPOLogger(TrainerCallback):
    """Per-step metrics and periodic transcripts of a GRPOTrainer into the active MLflow run."""

    def __init__(self, transcripts_every: int, transcripts_per_log: int, seed: int = 0):
        self.transcripts_every = transcripts_every
        self.transcripts_per_log = transcripts_per_log
        self.seed = seed
        self.trainer = None
        self.transcripts_logged = 0

    def attach(self, trainer) -> "MLflowGRPOLogger":
        """Give the callback the trainer whose `_logs` hold the latest episodes (callbacks don't get it)."""
        self.trainer = trainer
        return self

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:  # resumed: the checkpoint's log_history holds the earlier steps
            for entry in state.log_history:
                if "step" in entry and entry["step"] <= state.global_step:
                    metrics = numeric_metrics(entry)
                    if metrics:
                        mlflow.log_metrics(metrics, step=int(entry["step"]))
            mlflow.set_tag("resumed_from_step", str(state.global_step))

    def on_log(self, args, state, control, logs=None, **kwargs):
        metrics = numeric_metrics(logs or {})
        if metrics:
            mlflow.log_metrics(metrics, step=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        every = self.transcripts_every
        if self.trainer is None or every <= 0 or state.global_step % every:
            return
        records = sample_transcripts(self.trainer._logs, state.global_step, self.transcripts_per_log, self.seed)
        if not records:
            return
        lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True, default=str) + "\n" for r in records)
        mlflow.log_text(lines, f"transcripts/step_{state.global_step:05d}.jsonl")
        table = pd.DataFrame(
            {
                "step": [r["step"] for r in records],
                "question_id": [str(r.get("question_id", "")) for r in records],
                "verdict": [str(r.get("verdict", "")) for r in records],
                "reward": [r["reward"] for r in records],
                "advantage": [r["advantage"] for r in records],
                "reward_components": [json.dumps(r["reward_components"], sort_keys=True) for r in records],
                "transcript": [render_transcript(r["messages"]) for r in records],
            }
        )
        mlflow.log_table(table, artifact_file="transcripts.json")
        ids = [log_trace(f"step {r['step']} {r.get('question_id', '')}", r["messages"],  # the MLflow UI's agent view
                         {"verdict": r.get("verdict"), "reward": r["reward"], "advantage": r["advantage"]},
                         {"stage_step": r["step"], "question_id": r.get("question_id", ""), "verdict": r.get("verdict", "")})
               for r in records]  # fmt: skip
        log_feedback([(i, {"reward": (float(r["reward"] or 0.0), None)}) for i, r in zip(ids, records)])
        self.transcripts_logged += len(records)
