"""params.yaml as a `dvc exp run -S KEY=VALUE ...` leaves it: the values applied by DVC's own override code (Hydra, in
struct mode: a key params.yaml lacks is refused with DVC's InvalidArgumentError), then loaded and validated as a
stage loads it. Shared by the sweep tests (test_grpo.py) and the README-command tests."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from dvc.utils.hydra import apply_overrides

from pipeline.params import load_params

ROOT = Path(__file__).resolve().parents[1]


def params_with(values: list[str], tmp_path: Path) -> dict:
    """The repository's params.yaml, copied to `tmp_path`, with the `-S` values applied; as a nested dict."""
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    if values:
        apply_overrides(params, values)
    return dataclasses.asdict(load_params(params))
