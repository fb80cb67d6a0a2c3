"""Summarise this investigation's SFT runs against the baseline of exploring_teacher_44 (paired, by hardness,
taxonomy, and how many tables the agent describes before a first query that joins several).

    .venv/bin/python experiments/sft_signal_45/summarise.py [v3 v4]     -> run_v3.json, run_v4.json (v4 also against v3)

Reads `<side>/transfer_sft/` and `<side>/heldout_v1/` here (each a samples.jsonl.gz + metrics.json) and the
baseline's `transfer_sft/`, `transfer_base_sql/` and `heldout_v1/` in ../exploring_teacher_44/baseline/.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.eval.stats import wilson_interval  # noqa: E402
from sqlenv.failures import summarise_records  # noqa: E402
from sqlenv.report.results import read_records  # noqa: E402
from sqlenv.types import HARDNESS_LEVELS  # noqa: E402

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


def load(folder: Path):
    """The folder's episodes by question id (samples.jsonl.gz, as committed here)."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "samples.jsonl"
        plain.write_bytes(gzip.decompress((folder / "samples.jsonl.gz").read_bytes()))
        return {r.question_id: r for r in read_records(plain)}


def accuracy(records) -> dict:
    n = len(records)
    k = sum(bool(r.correct) for r in records)
    lo, hi = wilson_interval(k, n)
    unanswered = sum(not r.answered for r in records)
    return {"n": n, "correct": k, "accuracy": k / n, "low": lo, "high": hi, "unanswered": unanswered,
            "unanswered_rate": unanswered / n,
            "failures": summarise_records(records), "looked_before_joining": looked_before_joining(records)}  # fmt: skip


def pair(a: dict, b: dict, label_a: str, label_b: str) -> dict:
    ids = sorted(set(a) & set(b))
    out = {}
    for level in ("all", *HARDNESS_LEVELS):
        keep = [i for i in ids if level == "all" or a[i].hardness == level]
        if not keep:
            continue
        (row,) = paired_comparisons({label_a: [a[i] for i in keep], label_b: [b[i] for i in keep]})
        out[level] = row
    return out


def main(side: str) -> None:
    result = {}
    base_t, new_t = load(BASELINE / "transfer_sft"), load(HERE / f"{side}/transfer_sft")
    single = load(BASELINE / "transfer_base_sql")
    base_h, new_h = load(BASELINE / "heldout_v1"), load(HERE / f"{side}/heldout_v1")
    result["transfer"] = {"baseline_sft": accuracy(list(base_t.values())), "new_sft": accuracy(list(new_t.values())),
                          "base_sql": accuracy(list(single.values())),
                          "new_vs_baseline": pair(new_t, base_t, "new_sft", "baseline_sft"),
                          "baseline_vs_single_shot": pair(base_t, single, "baseline_sft", "base_sql"),
                          "new_vs_single_shot": pair(new_t, single, "new_sft", "base_sql")}  # fmt: skip
    result["heldout_v1"] = {"baseline_sft": accuracy(list(base_h.values())), "new_sft": accuracy(list(new_h.values())),
                            "new_vs_baseline": pair(new_h, base_h, "new_sft", "baseline_sft")}  # fmt: skip
    (HERE / f"run_{side}.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    t, h = result["transfer"], result["heldout_v1"]
    for name, block in (("transfer", t), ("heldout_v1", h)):
        for side in ("baseline_sft", "new_sft", "base_sql"):
            if side in block:
                m = block[side]
                print(f"{name:10s} {side:13s} {m['correct']:3d}/{m['n']} {100 * m['accuracy']:.1f} % "
                      f"[{100 * m['low']:.1f}, {100 * m['high']:.1f}] unanswered {m['unanswered']} "
                      f"{m['failures'].get('outcomes')} looked {m['looked_before_joining']}")  # fmt: skip
    for name, rows in (("transfer new-baseline", t["new_vs_baseline"]), ("transfer new-single", t["new_vs_single_shot"]),
                       ("transfer base-single", t["baseline_vs_single_shot"]), ("heldout new-baseline", h["new_vs_baseline"])):
        r = rows["all"]
        print(f"{name:22s} {100 * r['difference']:+.1f} [{100 * r['difference_low']:+.1f}, {100 * r['difference_high']:+.1f}] "
              f"only a {r['only_a_correct']} only b {r['only_b_correct']} p = {r['mcnemar_p']:.4f}")  # fmt: skip


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
    for side in sys.argv[1:] or ["v3", "v4"]:
        print(f"--- {side} against the baseline")
        main(side)
    if "v4" in (sys.argv[1:] or ["v4"]):
        against("v4", "v3")
