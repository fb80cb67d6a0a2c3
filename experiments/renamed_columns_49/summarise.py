"""Summarise this investigation's runs against the reference SFT agent and the issue's baseline, paired.

    .venv/bin/python experiments/renamed_columns_49/summarise.py run6 run7     -> run_<side>.json
    .venv/bin/python experiments/renamed_columns_49/summarise.py renamed_heldout  -> renamed_heldout.json (PLAN-3)

The pairing, taxonomy and reference records of `experiments/error_hints_48/summarise.py` (the committed reference
run's SFT agent on the transfer set and on `configs/fixed/synthetic_heldout_n200_v1`); each `<side>/` here holds
`transfer_sft` and `heldout_v1` (samples.jsonl.gz + metrics.json).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Loaded by path under its own name: both scripts are called summarise.py.
_spec = importlib.util.spec_from_file_location("error_hints_summarise", HERE.parent / "error_hints_48" / "summarise.py")
error_hints = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(error_hints)


def renamed_heldout() -> None:
    """PLAN-3: run 7's SFT and the reference SFT on the renamed world's held-out n200, paired."""
    run7, ref = (error_hints.load(HERE / "renamed_heldout" / name) for name in ("run7", "reference"))
    out = {"run7": error_hints.accuracy(list(run7.values())), "reference": error_hints.accuracy(list(ref.values())),
           "run7_vs_reference": error_hints.pair(run7, ref, "run7", "reference")}
    print(error_hints.line("renamed held-out run7", out["run7"]))
    print(error_hints.line("renamed held-out reference", out["reference"]))
    print(error_hints.diff("run7 - reference", out["run7_vs_reference"]["all"]))
    (HERE / "renamed_heldout.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    for side in sys.argv[1:] or ["run6"]:
        renamed_heldout() if side == "renamed_heldout" else error_hints.main(side, here=HERE)
