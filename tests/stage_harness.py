"""Run DVC stage scripts as DVC would — a subprocess in a work folder — for stage smoke tests.

The work folder stands in for the repository root: params.yaml there, relative outs
(data/, models/, reports/), a private MLflow store, DVC_ROOT pointing at it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def small_params(**overrides) -> dict:
    """The repo's params.yaml with a small synthetic world; overrides as {"section.key": value}."""
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["world"].update(domains=["school", "retail", "airline", "hospital"], databases_per_domain=1, questions_per_db=40)
    p["data"].update(n50=10, n200=30, indomain=10)
    for dotted, value in overrides.items():
        section, key = dotted.split(".") if "." in dotted else (None, dotted)
        (p[section] if section else p)[key] = value
    return p


def stage_env(workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}",
        "DVC_ROOT": str(workdir),
    }


def run_stage(workdir: Path, module: str, *args: str, params: dict | None = None, expect_ok: bool = True,
              timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m stages.<module> args…` in `workdir` (params.yaml written first when given)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if params is not None:
        (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    proc = subprocess.run(
        [sys.executable, "-m", f"stages.{module}", *args],
        cwd=workdir, env=stage_env(workdir), capture_output=True, text=True, timeout=timeout,
    )
    if expect_ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
