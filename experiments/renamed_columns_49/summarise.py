"""Summarise this investigation's runs against the reference SFT agent and the issue's baseline, paired.

    .venv/bin/python experiments/renamed_columns_49/summarise.py run6 run7     -> run_<side>.json

The pairing, taxonomy and reference records of `experiments/error_hints_48/summarise.py` (the committed reference
run's SFT agent on the transfer set and on `configs/fixed/synthetic_heldout_n200_v1`); each `<side>/` here holds
`transfer_sft` and `heldout_v1` (samples.jsonl.gz + metrics.json).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Loaded by path under its own name: both scripts are called summarise.py.
_spec = importlib.util.spec_from_file_location("error_hints_summarise", HERE.parent / "error_hints_48" / "summarise.py")
error_hints = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(error_hints)

if __name__ == "__main__":
    for side in sys.argv[1:] or ["run6"]:
        error_hints.main(side, here=HERE)
