"""Environment step throughput, and the cost of a query step relative to raw sqlite3.

Over the Spider questions the loader keeps (default /work/shared/spider dev), measures:

- steps/s for `describe`, `sample` and `query` through `SQLEnv.step` (each timed call is
  the whole step: argument checks, sandbox, rendering, reward shaping — progress shaping
  included, which compares the result with the gold rows);
- the ratio of the env's `query` step time to raw `sqlite3` on the same SQL and database:
  a fresh cursor, `execute`, `fetchall`, on one reused read-only connection per database
  (the env also reuses one sandbox connection per database). Both sides are warmed first,
  run interleaved per question, and each question's time is the minimum over `--rounds`
  rounds, so background noise on a shared machine inflates neither side; the order of the
  three timings rotates each round, because whichever runs first after a reset pays for
  cold CPU caches. The ratio is
  sum(env) / sum(raw); the median of per-question ratios is reported too, since the sum
  is dominated by the few slowest queries and the median by the many fast ones. The
  sandbox alone (`Sandbox.execute`) is timed the same way, to split the overhead between
  the sandbox's guards and the environment's own work per step;
- the cost of the progress potential Φ for results that do not match the gold rows (the
  timed gold queries take its equality short-cut).

Writes JSON to stdout and, with `--out`, to a file. Target: query ratio <= 1.25.

    .venv/bin/python bench/bench_env.py [--spider-dir DIR] [--rounds 6] [--out reports/bench/bench_env.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

from sqlenv.data.spider import load_spider  # noqa: E402
from sqlenv.env.environment import EnvConfig, SQLEnv, _potential  # noqa: E402
from sqlenv.types import db_file  # noqa: E402

DEFAULT_SPIDER = Path(os.environ.get("SQLENV_SPIDER_DIR", REPO.parent / "shared" / "spider"))


def _raw_connection(path: Path) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, cached_statements=256)


def _raw_query(conn: sqlite3.Connection, sql: str) -> float:
    start = time.perf_counter()
    cur = conn.cursor()
    cur.execute(sql)
    cur.fetchall()
    cur.close()
    return time.perf_counter() - start


def _env_step(env: SQLEnv, tool: str, args: dict) -> float:
    start = time.perf_counter()
    env.step(tool, args)
    return time.perf_counter() - start


def _subset_ratio(env_times: list[float], raw_times: list[float], min_raw_s: float) -> dict:
    pairs = [(e, r) for e, r in zip(env_times, raw_times) if r >= min_raw_s]
    if not pairs:
        return {"n": 0, "ratio": None}
    return {"n": len(pairs), "ratio": round(sum(e for e, _ in pairs) / sum(r for _, r in pairs), 3)}


def _sandbox_query(env: SQLEnv, sql: str) -> float:
    start = time.perf_counter()
    env.sandbox.execute(sql)
    return time.perf_counter() - start


def _nonmatching_potential_us(env: SQLEnv, questions: list) -> float:
    """Mean cost of Φ when a query's rows are *not* the gold rows (the gold query of the
    next question on the same database stands in for a wrong query): the timed query steps
    above take the equality short-cut, a wrong query pays the full `result_similarity`."""
    by_db: dict[str, list] = {}
    for q in questions:
        env.reset(q)
        by_db.setdefault(q.db_id, []).append(env.gold.rows)
    pairs = [(a, b) for golds in by_db.values() for a, b in zip(golds, golds[1:] + golds[:1]) if a != b]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for pred, gold in pairs:
            _potential(pred, gold)
        best = min(best, time.perf_counter() - start)
    return round(best / max(len(pairs), 1) * 1e6, 2)


def run(spider_dir: Path, rounds: int) -> dict:
    loaded = load_spider(spider_dir)
    questions = loaded.questions
    db_dir = spider_dir / "database"
    # A budget no benchmark reaches: every timed call must be a real step, never a post-episode one.
    env = SQLEnv(db_dir, EnvConfig(step_budget=10**9))
    raw = {db: _raw_connection(db_file(db_dir, db)) for db in sorted({q.db_id for q in questions})}

    # Warm both sides: open sandboxes, cache gold results and schema, fill statement caches.
    for q in questions:
        env.reset(q)
        env.step("query", {"sql": q.gold_sql})
        _raw_query(raw[q.db_id], q.gold_sql)

    tables = {db: SQLEnv(db_dir).sandbox_for(db).table_names() for db in raw}
    for db, names in tables.items():  # warm the sandboxes' schema caches (describe reads them)
        env.reset(next(q for q in questions if q.db_id == db))
        for name in names:
            env.step("describe", {"table_name": name})
            env.step("sample", {"table_name": name})
    per_tool: dict[str, list[float]] = {"describe": [], "sample": []}
    env_best = [float("inf")] * len(questions)
    box_best = [float("inf")] * len(questions)
    raw_best = [float("inf")] * len(questions)
    for r in range(rounds):
        for i, q in enumerate(questions):
            env.reset(q)  # not timed: one query step per episode, as in the first call of an episode
            timers = [
                (env_best, lambda: _env_step(env, "query", {"sql": q.gold_sql})),
                (box_best, lambda: _sandbox_query(env, q.gold_sql)),
                (raw_best, lambda: _raw_query(raw[q.db_id], q.gold_sql)),
            ]
            # Whichever side runs first after a reset pays for cold CPU caches; rotating the
            # order each round gives every side the first slot equally often.
            for k in range(3):
                best, timer = timers[(k + r) % 3]
                best[i] = min(best[i], timer())
        for db, names in tables.items():
            q = next(q for q in questions if q.db_id == db)
            env.reset(q)
            for name in names:
                per_tool["describe"].append(_env_step(env, "describe", {"table_name": name}))
                per_tool["sample"].append(_env_step(env, "sample", {"table_name": name}))
    for conn in raw.values():
        conn.close()

    env_total, box_total, raw_total = sum(env_best), sum(box_best), sum(raw_best)
    similarity_us = _nonmatching_potential_us(env, questions)
    ratios = [e / r for e, r in zip(env_best, raw_best) if r > 0]
    return {
        "questions": len(questions),
        "dropped_by_loader": len(loaded.dropped),
        "rounds": rounds,
        "steps_per_s": {
            "describe": round(len(per_tool["describe"]) / sum(per_tool["describe"]), 1),
            "sample": round(len(per_tool["sample"]) / sum(per_tool["sample"]), 1),
            "query": round(len(questions) / env_total, 1),
        },
        "raw_sqlite_queries_per_s": round(len(questions) / raw_total, 1),
        "query_env_ms_total": round(env_total * 1000, 2),
        "query_raw_ms_total": round(raw_total * 1000, 2),
        "query_ratio": round(env_total / raw_total, 3),
        "query_ratio_median": round(statistics.median(ratios), 3),
        "target_query_ratio": 1.25,
        # The env's own work is a fixed few microseconds per step; on slower queries it fades.
        "query_ratio_raw_over_100us": _subset_ratio(env_best, raw_best, 100e-6),
        "sandbox_ratio": round(box_total / raw_total, 3),
        "env_overhead_us_per_step": round((env_total - box_total) / len(questions) * 1e6, 2),
        "raw_query_us_median": round(statistics.median(raw_best) * 1e6, 2),
        "progress_potential_us_nonmatching_mean": similarity_us,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spider-dir", type=Path, default=DEFAULT_SPIDER, help="Spider-format folder")
    parser.add_argument("--rounds", type=int, default=6,
                        help="timing rounds (a multiple of 3 rotates the order evenly); each question keeps its minimum")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if not (args.spider_dir / "dev.json").is_file():
        print(f"bench_env: no Spider data at {args.spider_dir}", file=sys.stderr)
        return 2
    report = run(args.spider_dir, max(1, args.rounds))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
