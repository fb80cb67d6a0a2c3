"""Evaluation results on disk and in MLflow: what the `evaluate` stage and `sqlenv eval` both write.

A result is a folder with `samples.jsonl` (one `EpisodeRecord` per question) and `metrics.json`
(`sqlenv.eval.harness.result_document`). Samples are written first, so a folder with a metrics file is
complete; each file is written atomically. `log_result` puts the same into the active MLflow run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd

from pipeline.io import atomic_write_json, atomic_write_jsonl
from pipeline.tracking import log_metrics
from sqlenv.types import EpisodeRecord


def write_result(out: str | os.PathLike[str], records: Sequence[EpisodeRecord], document: dict[str, Any]) -> Path:
    out = Path(out)
    atomic_write_jsonl(out / "samples.jsonl", [r.to_dict() for r in records])
    atomic_write_json(out / "metrics.json", document)
    return out


def log_result(out: str | os.PathLike[str], records: Sequence[EpisodeRecord], document: dict[str, Any]) -> None:
    """Metrics (nested names flattened), both files and a transcripts table, into the active run."""
    out = Path(out)
    log_metrics(document["metrics"])
    mlflow.log_artifact(str(out / "samples.jsonl"))
    mlflow.log_artifact(str(out / "metrics.json"))
    mlflow.log_table(transcripts_table(records), artifact_file="transcripts.json")


def transcripts_table(records: Sequence[EpisodeRecord]) -> pd.DataFrame:
    rows = [{
        "question_id": r.question_id, "hardness": r.hardness, "correct": r.correct, "answer": r.answer or "",
        "steps": r.steps, "end_reason": r.end_reason, "verdict": r.verdict_reason,
        "transcript": "\n".join(f"[{m['role']}] {m.get('content') or ''} {m.get('tool_calls') or ''}".strip()
                                for m in r.messages[2:]),
    } for r in records]  # fmt: skip
    return pd.DataFrame(rows)
