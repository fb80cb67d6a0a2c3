"""What rendering a result costs, by the kinds of its cells, over the distinct results of bench_env's mixed
workload (see parts.py); and whether C-level joins would render integers faster than `_row_cells`' loop.
JSON to stdout.

    .venv/bin/python experiments/env_overhead_33/render_cost.py > experiments/env_overhead_33/render_cost.json
"""
import json
import sys
import timeit
from collections import defaultdict
from itertools import chain
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parts  # noqa: E402  (builds the workload and its results; its timings run only as a script)
from sqlenv.env import prompts  # noqa: E402

cfg = parts.env.config
by_kind = defaultdict(lambda: {"results": 0, "us": 0.0})
for result in parts.results.values():
    head = result.rows[: cfg.max_rows_shown]
    kinds = {type(v) for row in head for v in row}
    kind = ("error" if not result.ok else "0-1 rows" if len(result.rows) <= 1 else "text" if kinds == {str}
            else "text+int" if kinds <= {str, int} else "with float or NULL")  # fmt: skip
    us = min(timeit.repeat(lambda: prompts.render_result(result, cfg.max_rows_shown, cfg.max_chars_shown), number=50, repeat=5)) / 50 * 1e6
    by_kind[kind]["results"] += 1
    by_kind[kind]["us"] += us
summary = {k: {"results": v["results"], "us_per_result": round(v["us"] / v["results"], 2)} for k, v in by_kind.items()}

SEP = " | "


def loop(rows):  # what render_result does for rows that are not all text
    return "\n".join(SEP.join(prompts._row_cells(r)) for r in rows)


def c_level(rows):  # every cell through str() in C, grouped back into rows by zip
    cells = iter(list(map(str, chain.from_iterable(rows))))
    return "\n".join(map(SEP.join, zip(*[cells] * len(rows[0]))))


joins = {}
for n, k in ((2, 2), (10, 2), (50, 3)):
    rows = [(f"name{i}", i) + tuple(range(k - 2)) for i in range(n)]
    assert loop(rows) == c_level(rows)
    joins[f"{n}x{k}"] = {f: round(min(timeit.repeat(lambda: fn(rows), number=2000, repeat=5)) / 2000 * 1e6, 2)
                         for f, fn in (("row_cells_loop_us", loop), ("c_level_us", c_level))}  # fmt: skip
print(json.dumps({"distinct_results": len(parts.results), "render_by_kind": summary, "text_and_int_rows": joins}, indent=1))
