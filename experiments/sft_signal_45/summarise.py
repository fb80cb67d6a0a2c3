"""Summarise this investigation's SFT runs against the baseline of exploring_teacher_44 (paired, by hardness,
taxonomy, and how many tables the agent describes before a first query that joins several).

    .venv/bin/python experiments/sft_signal_45/summarise.py [v3 v4 v5]     -> run_v3.json, ... (v4, v5 also against v3)

Reads `<side>/transfer_sft/` and `<side>/heldout_v1/` here (each a samples.jsonl.gz + metrics.json) and the
baseline's `transfer_sft/`, `transfer_base_sql/` and `heldout_v1/` in ../exploring_teacher_44/baseline/.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

import importlib.util  # noqa: E402

# The baseline investigation's readers (records → accuracy with its taxonomy; paired rows by hardness).
_spec = importlib.util.spec_from_file_location("teacher_44", HERE.parent / "exploring_teacher_44" / "summarise.py")
teacher_44 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(teacher_44)
load, pair = teacher_44.load, teacher_44.pair

BASELINE = HERE.parent / "exploring_teacher_44" / "baseline"
TABLES = re.compile(r"Tables in the database: (.*)\.")
FROM = re.compile(r"(?:FROM|JOIN)\s+([A-Za-z_][A-Za-z_0-9]*)", re.IGNORECASE)


def looked_before_joining(records) -> dict:
    """Of the episodes whose first query reads two or more of the database's tables: how many described every
    one of them before it (a regex over FROM/JOIN names, enough for a count)."""
    joins = described_all = 0
    for r in records:
        listed = TABLES.search(r.messages[1]["content"]) if len(r.messages) > 1 else None
        if listed is None:  # a single-shot record: no episode
            continue
        tables = {t.lower() for t in listed.group(1).split(", ")}
        seen = set()
        for m in r.messages:
            call = (m.get("tool_calls") or [None])[0]
            if call is None:
                continue
            args = call["function"]["arguments"]
            args = json.loads(args) if isinstance(args, str) else args
            if call["function"]["name"] == "describe":
                seen.add(str(args.get("table_name", "")).lower())
            elif call["function"]["name"] == "query":
                used = {t.lower() for t in FROM.findall(str(args.get("sql", "")))} & tables
                if len(used) >= 2:
                    joins += 1
                    described_all += used <= seen
                break
    return {"first_query_joins": joins, "all_its_tables_described": described_all}


def accuracy(records) -> dict:
    return {**teacher_44.accuracy(records), "looked_before_joining": looked_before_joining(records)}


def main(side: str) -> None:
    t = {"baseline_sft": load(BASELINE / "transfer_sft"), "new_sft": load(HERE / f"{side}/transfer_sft"),
         "base_sql": load(BASELINE / "transfer_base_sql")}  # fmt: skip
    h = {"baseline_sft": load(BASELINE / "heldout_v1"), "new_sft": load(HERE / f"{side}/heldout_v1")}
    result = {
        "transfer": {name: accuracy(list(records.values())) for name, records in t.items()},
        "heldout_v1": {name: accuracy(list(records.values())) for name, records in h.items()},
    }
    pairs = {("transfer", "new_vs_baseline"): (t, "new_sft", "baseline_sft"),
             ("transfer", "new_vs_single_shot"): (t, "new_sft", "base_sql"),
             ("transfer", "baseline_vs_single_shot"): (t, "baseline_sft", "base_sql"),
             ("heldout_v1", "new_vs_baseline"): (h, "new_sft", "baseline_sft")}  # fmt: skip
    for (block, key), (records, a, b) in pairs.items():
        result[block][key] = pair(records[a], records[b], a, b)
    (HERE / f"run_{side}.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    for block, rows in result.items():
        for name, m in rows.items():
            if "n" in m:
                print(f"{block:10s} {name:13s} {m['correct']:3d}/{m['n']} {100 * m['accuracy']:.1f} % "
                      f"[{100 * m['low']:.1f}, {100 * m['high']:.1f}] unanswered {m['unanswered']} "
                      f"{m['failures'].get('outcomes')} looked {m['looked_before_joining']}")  # fmt: skip
    for (block, key) in pairs:
        r = result[block][key]["all"]
        print(f"{block} {key}: {100 * r['difference']:+.1f} [{100 * r['difference_low']:+.1f}, "
              f"{100 * r['difference_high']:+.1f}] p = {r['mcnemar_p']:.4f}")  # fmt: skip


def against(side: str, other: str) -> None:
    """`side` − `other` on both sets, paired (e.g. v4 against v3), into run_<side>.json."""
    path = HERE / f"run_{side}.json"
    result = json.loads(path.read_text())
    for name in ("transfer_sft", "heldout_v1"):
        rows = pair(load(HERE / f"{side}/{name}"), load(HERE / f"{other}/{name}"), side, other)
        result.setdefault(f"against_{other}", {})[name] = rows
        r = rows["all"]
        print(f"{name:12s} {side} - {other} {100 * r['difference']:+.1f} [{100 * r['difference_low']:+.1f}, "
              f"{100 * r['difference_high']:+.1f}] p = {r['mcnemar_p']:.4f}")  # fmt: skip
    path.write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    for side in sys.argv[1:] or ["v3", "v4", "v5"]:
        print(f"--- {side} against the baseline")
        main(side)
        if side != "v3":
            against(side, "v3")
