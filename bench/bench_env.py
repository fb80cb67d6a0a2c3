"""Environment step throughput, and the cost of a query step relative to raw sqlite3.

Over the Spider questions the loader keeps (default /work/shared/spider dev), measures:

- steps/s for `describe`, `sample` and `query` through `SQLEnv.step` (each timed call is
  the whole step: argument checks, sandbox, rendering, the reward terms of a query — the
  call key, the repeat window, whether the result is new, the bound. Progress, the one term
  that compares rows with the gold rows, is paid with the answer, not per query);
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
- the same on a mixed workload (`mixed` in the JSON): per question one episode that first
  queries something whose rows do *not* match the gold rows — the gold SQL of the next
  question on the same database with other rows, else `SELECT * FROM <table> LIMIT 5` over
  a table with other rows — and then the gold SQL. Per question the times of its two
  queries are summed (each the minimum over the rounds), so the median is of per-question
  ratios again, and the query ratio target is the same. The gold-only workload never
  shows the env a wrong result, nor a second query in an episode (whose new-result test
  has an earlier result to compare with);
- the cost of the progress potential Φ (paid once per episode, with the answer) for those
  non-matching results: the gold rows take its equality short-cut, a wrong result pays
  the full `result_similarity`.

Writes JSON to stdout and, with `--out`, to a file. Target: query ratio <= 1.25, gold-only
and mixed.

    .venv/bin/python bench/bench_env.py [--spider-dir DIR] [--rounds 6] [--out bench/results/env.json]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

import bench_machine  # noqa: E402
from pipeline.io import print_json  # noqa: E402
from sqlenv.data.spider import load_spider  # noqa: E402
from sqlenv.env.environment import EnvConfig, SQLEnv, _potential  # noqa: E402
from sqlenv.env.sandbox import quote_identifier  # noqa: E402
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


def _matches(rows: list[tuple], gold_rows: list[tuple]) -> bool:
    """Whether rows equal the gold rows as a list or as a multiset (what `_potential` short-cuts)."""
    return rows == gold_rows or Counter(rows) == Counter(gold_rows)


def _nonmatching_sql(env: SQLEnv, questions: list, golds: list[list[tuple]]) -> list[tuple[str | None, str]]:
    """For each question, a deterministic query on its database whose rows do not match its gold rows.

    The gold SQL of the next question on the same database (loader order, cyclically) whose
    gold rows differ from this question's; failing that, `SELECT * FROM <table> LIMIT 5` over
    the database's tables in name order, the first whose rows differ; None if nothing does.
    Each comes with where it came from: `other_gold`, `table`, or `none`.
    """
    by_db: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_db.setdefault(q.db_id, []).append(i)
    chosen: list[tuple[str | None, str]] = []
    for i, q in enumerate(questions):
        peers = by_db[q.db_id]
        at = peers.index(i)
        pick = next(
            (questions[j].gold_sql for j in peers[at + 1 :] + peers[:at] if not _matches(golds[j], golds[i])),
            None,
        )
        source = "other_gold"
        if pick is None:
            source = "none"
            env.reset(q)
            for name in env.tables:
                sql = f"SELECT * FROM {quote_identifier(name)} LIMIT 5"
                result = env.sandbox.execute(sql)
                if result.ok and not _matches(result.rows, golds[i]):
                    pick, source = sql, "table"
                    break
        chosen.append((pick, source))
    return chosen


def _time_workload(env: SQLEnv, raw: dict, questions: list, workload: list[list[str]], r: int, best: tuple) -> None:
    """One round of a workload: per question one episode (its reset not timed) running the
    question's queries in order, each timed as an env `query` step, the sandbox alone and raw
    sqlite3, in an order that rotates each round; `best[side][i][j]` keeps the minimum."""
    for i, (q, sqls) in enumerate(zip(questions, workload)):
        env.reset(q)
        conn = raw[q.db_id]
        for j, sql in enumerate(sqls):
            timers = (
                lambda: _env_step(env, "query", {"sql": sql}),
                lambda: _sandbox_query(env, sql),
                lambda: _raw_query(conn, sql),
            )
            # Whichever side runs first after a reset pays for cold CPU caches; rotating the
            # order each round gives every side the first slot equally often.
            for k in range(3):
                side = (k + r) % 3
                row = best[side][i]
                row[j] = min(row[j], timers[side]())


def _query_ratios(best: tuple) -> dict:
    """Summaries of one workload's timings: per question the sum over its queries."""
    env_q, box_q, raw_q = ([sum(row) for row in side] for side in best)
    env_total, box_total, raw_total = sum(env_q), sum(box_q), sum(raw_q)
    n_queries = sum(len(row) for row in best[0])
    if not n_queries:  # no question had a non-matching query (never on Spider)
        return {"questions": 0, "queries": 0}
    return {
        "questions": len(env_q),
        "queries": n_queries,
        "query_env_ms_total": round(env_total * 1000, 2),
        "query_raw_ms_total": round(raw_total * 1000, 2),
        "query_ratio": round(env_total / raw_total, 3),
        "query_ratio_median": round(statistics.median(e / r for e, r in zip(env_q, raw_q) if r > 0), 3),
        # The env's own work is a fixed few microseconds per step; on slower queries it fades.
        "query_ratio_raw_over_100us": _subset_ratio(
            [t for row in best[0] for t in row], [t for row in best[2] for t in row], 100e-6
        ),
        "sandbox_ratio": round(box_total / raw_total, 3),
        "env_overhead_us_per_step": round((env_total - box_total) / n_queries * 1e6, 2),
        "raw_query_us_median": round(statistics.median(t for row in best[2] for t in row) * 1e6, 2),
    }


def _potential_us(pairs: list[tuple[list, list]]) -> float:
    """Mean cost of Φ over (rows, gold rows) pairs, the best of 3 passes."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for rows, gold in pairs:
            _potential(rows, gold)
        best = min(best, time.perf_counter() - start)
    return round(best / max(len(pairs), 1) * 1e6, 2)


def run(spider_dir: Path, rounds: int) -> dict:
    loaded = load_spider(spider_dir)
    questions = loaded.questions
    db_dir = spider_dir / "database"
    # A budget no benchmark reaches: every timed call must be a real step, never a post-episode one.
    env = SQLEnv(db_dir, EnvConfig(step_budget=10**9))
    raw = {db: _raw_connection(db_file(db_dir, db)) for db in sorted({q.db_id for q in questions})}

    golds = []
    for q in questions:
        env.reset(q)
        golds.append(env.gold.rows)
    others = _nonmatching_sql(env, questions, golds)
    gold_only = [[q.gold_sql] for q in questions]
    # Mixed: an episode that first runs a query with other rows, then the gold SQL.
    mixed_idx = [i for i, (sql, _) in enumerate(others) if sql is not None]
    mixed_questions = [questions[i] for i in mixed_idx]
    mixed = [[others[i][0], questions[i].gold_sql] for i in mixed_idx]
    workloads = [(questions, gold_only), (mixed_questions, mixed)]

    # Warm both sides: open sandboxes, cache gold results and schema, fill statement caches.
    for qs, workload in workloads:
        for q, sqls in zip(qs, workload):
            env.reset(q)
            for sql in sqls:
                env.step("query", {"sql": sql})
                _raw_query(raw[q.db_id], sql)

    tables = {db: SQLEnv(db_dir).sandbox_for(db).table_names() for db in raw}
    for db, names in tables.items():  # warm the sandboxes' schema caches (describe reads them)
        env.reset(next(q for q in questions if q.db_id == db))
        for name in names:
            env.step("describe", {"table_name": name})
            env.step("sample", {"table_name": name})
    per_tool: dict[str, list[float]] = {"describe": [], "sample": []}
    bests = [
        tuple([[float("inf")] * len(sqls) for sqls in workload] for _ in range(3))  # env, sandbox, raw
        for _, workload in workloads
    ]
    for r in range(rounds):
        for (qs, workload), best in zip(workloads, bests):
            _time_workload(env, raw, qs, workload, r, best)
        for db, names in tables.items():
            q = next(q for q in questions if q.db_id == db)
            env.reset(q)
            for name in names:
                per_tool["describe"].append(_env_step(env, "describe", {"table_name": name}))
                per_tool["sample"].append(_env_step(env, "sample", {"table_name": name}))
    for conn in raw.values():
        conn.close()

    gold_stats, mixed_stats = (_query_ratios(best) for best in bests)
    env_total = sum(t for row in bests[0][0] for t in row)
    raw_total = sum(t for row in bests[0][2] for t in row)
    gold_of = {id(q): g for q, g in zip(questions, golds)}
    nonmatching_pairs = []
    for q, (other, _) in zip(mixed_questions, mixed):
        env.reset(q)
        nonmatching_pairs.append((env.sandbox.execute(other).rows, gold_of[id(q)]))
    del gold_stats["questions"], gold_stats["queries"]
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
        **gold_stats,
        "target_query_ratio": 1.25,
        # Per question: a query whose rows do not match the gold rows, then the gold SQL, in one episode.
        "mixed": {
            "nonmatching_source": dict(sorted(Counter(source for _, source in others).items())),
            **mixed_stats,
        },
        "progress_potential_us_nonmatching_mean": _potential_us(nonmatching_pairs),
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
    where = bench_machine.record()
    report = {**where, **run(args.spider_dir, max(1, args.rounds)), "loadavg_after": os.getloadavg()}
    print_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
