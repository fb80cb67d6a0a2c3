"""Summarise this investigation's runs against the reference SFT agent and the issue's baseline, paired.

    .venv/bin/python experiments/error_hints_48/summarise.py run1 run2 ...     -> run_<side>.json

Reads the records copied into this folder (samples.jsonl.gz + metrics.json): `reference/transfer_sft` and
`reference/heldout_v1` (the committed reference run's SFT agent: transfer set and held-out n200, which is
`configs/fixed/synthetic_heldout_n200_v1`), `<side>/transfer_sft` and, where it was run, `<side>/heldout_v1`; and
`experiments/exploring_teacher_44/baseline/` (the issue's "today": main before the transfer work's teacher changes,
64/200 on the transfer set) and its `transfer_base_sql` (the base model's single shot on the same ids).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments" / "exploring_teacher_44"))

from summarise import accuracy, load, pair  # noqa: E402  (the same pairing and taxonomy as that record's)

BASELINE = REPO / "experiments" / "exploring_teacher_44" / "baseline"


def line(name: str, m: dict) -> str:
    return (f"{name:24s} {m['correct']:3d}/{m['n']} {100 * m['accuracy']:.1f} % [{100 * m['low']:.1f}, "
            f"{100 * m['high']:.1f}] unanswered {m['unanswered']} {m['failures'].get('outcomes')}")  # fmt: skip


def diff(name: str, r: dict) -> str:
    return (f"{name:30s} {100 * r['difference']:+.1f} [{100 * r['difference_low']:+.1f}, {100 * r['difference_high']:+.1f}]"
            f" only a {r['only_a_correct']} only b {r['only_b_correct']} p = {r['mcnemar_p']:.4f}")  # fmt: skip


def main(side: str, here: Path = HERE) -> None:
    """`here`: the folder holding `<side>/` and receiving run_<side>.json (another investigation's, sharing this
    folder's reference records)."""
    ref_t, new_t = load(HERE / "reference/transfer_sft"), load(here / f"{side}/transfer_sft")
    today_t, single = load(BASELINE / "transfer_sft"), load(BASELINE / "transfer_base_sql")
    result = {"transfer": {"reference_sft": accuracy(list(ref_t.values())), "new_sft": accuracy(list(new_t.values())),
                           "today_sft": accuracy(list(today_t.values())), "base_sql": accuracy(list(single.values())),
                           "new_vs_reference": pair(new_t, ref_t, "new_sft", "reference_sft"),
                           "new_vs_today": pair(new_t, today_t, "new_sft", "today_sft"),
                           "new_vs_single_shot": pair(new_t, single, "new_sft", "base_sql")}}  # fmt: skip
    print(f"--- {side}")
    for key in ("today_sft", "reference_sft", "new_sft", "base_sql"):
        print(line(f"transfer {key}", result["transfer"][key]))
    for key in ("new_vs_reference", "new_vs_today", "new_vs_single_shot"):
        print(diff(f"transfer {key}", result["transfer"][key]["all"]))
    if (here / side / "heldout_v1").is_dir():
        ref_h, new_h, today_h = (load(p) for p in (HERE / "reference/heldout_v1", here / side / "heldout_v1",
                                                  BASELINE / "heldout_v1"))  # fmt: skip
        result["heldout_v1"] = {"reference_sft": accuracy(list(ref_h.values())), "new_sft": accuracy(list(new_h.values())),
                                "today_sft": accuracy(list(today_h.values())),
                                "new_vs_reference": pair(new_h, ref_h, "new_sft", "reference_sft"),
                                "new_vs_today": pair(new_h, today_h, "new_sft", "today_sft")}  # fmt: skip
        for key in ("today_sft", "reference_sft", "new_sft"):
            print(line(f"heldout {key}", result["heldout_v1"][key]))
        for key in ("new_vs_reference", "new_vs_today"):
            print(diff(f"heldout {key}", result["heldout_v1"][key]["all"]))
    (here / f"run_{side}.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    for side in sys.argv[1:] or ["run1"]:
        main(side)
