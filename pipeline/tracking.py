"""One MLflow run per stage execution, tagged so runs can be found and compared.

Where the store lives: `$MLFLOW_TRACKING_URI` if set, else a SQLite store `mlflow.db` at
the repository root resolved against `DVC_ROOT`. DVC runs queued and `--temp` experiments
in a throw-away copy of the repo; a store path relative to the working directory would be
created (and lost) inside that copy, so the root comes from DVC_ROOT, which DVC points
at the real workspace. Artifacts go to `mlartifacts/` beside the store for the same reason.

Tags on every run: `stage`, `git_commit` (+ `git_dirty`), `dvc_exp_name`,
`dvc_exp_baseline_rev`, `params_hash` (of exactly the params the stage read).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import mlflow

from pipeline.params import flatten, params_hash, repo_root

EXPERIMENT_NAME = "sqlenv"


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{repo_root() / 'mlflow.db'}"


def git_commit() -> tuple[str, bool]:
    """(commit sha or 'unknown', whether tracked files differ from it)."""
    root = repo_root()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root, capture_output=True, text=True, check=True,
            ).stdout.strip()
        )
        return sha, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def _experiment_id() -> str:
    exp = mlflow.get_experiment_by_name(EXPERIMENT_NAME)
    if exp is not None:
        return exp.experiment_id
    artifacts = (repo_root() / "mlartifacts").as_uri()
    try:
        return mlflow.create_experiment(EXPERIMENT_NAME, artifact_location=artifacts)
    except mlflow.exceptions.MlflowException:
        # Another stage created it between our lookup and create (parallel `dvc queue` workers).
        return mlflow.get_experiment_by_name(EXPERIMENT_NAME).experiment_id


def run_tags(stage: str, params: dict[str, Any]) -> dict[str, str]:
    sha, dirty = git_commit()
    return {
        "stage": stage,
        "git_commit": sha,
        "git_dirty": str(dirty).lower(),
        "dvc_exp_name": os.environ.get("DVC_EXP_NAME", ""),
        "dvc_exp_baseline_rev": os.environ.get("DVC_EXP_BASELINE_REV", ""),
        "params_hash": params_hash(params),
    }


@contextlib.contextmanager
def stage_run(stage: str, params: dict[str, Any], run_name: str | None = None) -> Iterator[Any]:
    """Open the stage's MLflow run, log its params and tags, and end it FAILED on error.

    `params` is the nested dict of exactly the sections the stage read. The run id is also
    exported as MLFLOW_RUN_ID so a Hugging Face trainer's MLflow callback logs into it.
    """
    mlflow.set_tracking_uri(tracking_uri())
    experiment_id = _experiment_id()
    tags = run_tags(stage, params)
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name or stage, tags=tags) as run:
        mlflow.log_params(flatten(params))
        previous = os.environ.get("MLFLOW_RUN_ID")
        os.environ["MLFLOW_RUN_ID"] = run.info.run_id
        try:
            yield run
        finally:
            if previous is None:
                os.environ.pop("MLFLOW_RUN_ID", None)
            else:
                os.environ["MLFLOW_RUN_ID"] = previous


def log_metrics(metrics: dict[str, Any], step: int | None = None, prefix: str = "") -> None:
    """Log the numeric leaves of a nested dict as `prefix/a/b` metrics (non-numbers skipped)."""
    flat = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = (prefix + key).replace(".", "/")
        flat[name] = float(value)
    if flat:
        mlflow.log_metrics(flat, step=step)
