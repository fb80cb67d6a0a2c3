"""How often `sqlenv.data.hardness.hardness` agrees with Spider's official hardness labels.

Reads a Spider-format questions file and a TSV of official labels by position (columns
`index`, `db_id`, `hardness`, as in /work/shared/spider/dev_hardness.tsv), labels every gold
query with our sqlglot-based labeller and writes JSON: overall agreement, agreement per
official level (a recall), the confusion matrix (official -> ours) and every disagreement
with its components, so a mismatch can be traced to the rule that caused it.

    .venv/bin/python bench/hardness_agreement.py [--spider-dir DIR] [--out bench/results/hardness_agreement.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

from sqlenv.data.hardness import hardness_components, level_from_components  # noqa: E402
from sqlenv.types import HARDNESS_LEVELS  # noqa: E402


def agreement_report(questions: list[dict], official: list[str]) -> dict:
    """Agreement figures for `questions` (Spider records) against `official` labels by position."""
    if len(questions) != len(official):
        raise ValueError(f"{len(questions)} questions but {len(official)} official labels")
    confusion = {g: {o: 0 for o in HARDNESS_LEVELS} for g in HARDNESS_LEVELS}
    disagreements, errors = [], []
    started = time.perf_counter()
    for i, (q, gold) in enumerate(zip(questions, official)):
        try:
            comps = hardness_components(q["query"])
        except ValueError as e:
            errors.append({"index": i, "db_id": q.get("db_id"), "error": str(e), "query": q["query"]})
            continue
        ours = level_from_components(comps)
        confusion[gold][ours] += 1
        if ours != gold:
            disagreements.append(
                {
                    "index": i,
                    "db_id": q.get("db_id"),
                    "official": gold,
                    "ours": ours,
                    "components": [comps.component1, comps.component2, comps.others],
                    "query": q["query"],
                }
            )
    elapsed = time.perf_counter() - started
    n = len(questions)
    agree = sum(confusion[g][g] for g in HARDNESS_LEVELS)
    per_level = {}
    for g in HARDNESS_LEVELS:
        total = sum(1 for o in official if o == g)
        per_level[g] = {"n": total, "agree": confusion[g][g], "agreement": confusion[g][g] / total if total else None}
    return {
        "n": n,
        "agree": agree,
        "agreement": agree / n if n else None,
        "per_level": per_level,
        "confusion_official_to_ours": confusion,
        "parse_errors": errors,
        "disagreements": disagreements,
        "seconds": round(elapsed, 3),
        "ms_per_query": round(1000 * elapsed / n, 3) if n else None,
    }


def main(argv: list[str] | None = None) -> int:
    default_dir = os.environ.get("SQLENV_SPIDER_DIR") or str(REPO.parent / "shared" / "spider")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider-dir", default=default_dir)
    ap.add_argument("--questions", default="dev.json")
    ap.add_argument("--labels", default="dev_hardness.tsv")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    spider = Path(args.spider_dir)
    questions = json.loads((spider / args.questions).read_text())
    with open(spider / args.labels, newline="") as f:
        rows = sorted(csv.DictReader(f, delimiter="\t"), key=lambda r: int(r["index"]))
    report = agreement_report(questions, [r["hardness"] for r in rows])
    report["source"] = {"questions": str(spider / args.questions), "labels": str(spider / args.labels)}

    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
