"""Every path the DAG shares, in one place (dvc.yaml spells the same strings).

Stages run with the repository root as working directory (DVC's `wdir` default), so the
paths are relative; they resolve inside a queued experiment's temporary copy too.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path("data")
QUESTIONS = DATA / "questions"
DATABASES = DATA / "databases"
SFT_DATA = DATA / "sft"
TRANSFER = DATA / "transfer"  # the transfer set: questions.jsonl, databases/, manifest.json (stage transfer_data)
MODELS = Path("models")
REPORTS = Path("reports")
CHECKPOINTS = Path("checkpoints")  # crash-safe training state, deliberately outside every DVC out


def questions_file(split: str) -> Path:
    """data/questions/<split>.jsonl for split in train, n50, n200, indomain (the sets: `sqlenv.report.results.SETS`)."""
    return QUESTIONS / f"{split}.jsonl"


def report_dir(stage: str) -> Path:
    """reports/<stage>/ — the folder shares the stage's name (one name everywhere)."""
    return REPORTS / stage


def metrics_file(stage: str) -> Path:
    return report_dir(stage) / "metrics.json"
