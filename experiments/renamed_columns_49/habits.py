"""The habits this investigation predicts a change in, counted over a transfer record (aggregates only).

    .venv/bin/python experiments/renamed_columns_49/habits.py <folder with samples.jsonl.gz> ...

Per record: episodes meeting a SQL error; the first error's kind (a column under a qualifier, `T1.Name`; a bare
missing column; a missing table; other); queries naming two or more tables, and how many of them came after every
one of those tables was described; the first query of an episode sent before any of its tables was described.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlenv.data.hardness import tables_used  # noqa: E402
from sqlenv.failures import calls  # noqa: E402


def first_error_kind(observation: str) -> str:
    text = observation.lower()
    if "no such column" in text:
        return "qualified column" if re.search(r"no such column: \w+\.\w+", text) else "bare column"
    return "missing table" if "no such table" in text else "other"


def habits(folder: Path) -> dict:
    out: Counter = Counter()
    for line in gzip.open(folder / "samples.jsonl.gz", "rt"):
        record = json.loads(line)
        described: set[str] = set()
        first_query = True
        played = calls(record["messages"])
        errors = [c for c in played if c.failed and c.tool == "query"]
        out["episodes"] += 1
        if errors:
            out["with_error"] += 1
            out[f"first_error: {first_error_kind(errors[0].observation)}"] += 1
        for c in played:
            if c.tool == "describe":
                described.add(c.key[1].lower())
            elif c.tool == "query":
                try:
                    tables = {t.lower() for t in tables_used(c.key[1])}
                except Exception:  # noqa: BLE001  (a query sqlglot cannot parse: counted apart)
                    out["queries_unparsed"] += 1
                    continue
                if first_query:
                    out["first_query_none_described"] += bool(tables) and not tables & described
                    first_query = False
                if len(tables) >= 2:
                    out["join_queries"] += 1
                    out["join_queries_all_described"] += tables <= described
    return dict(sorted(out.items()))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, json.dumps(habits(Path(arg))))
