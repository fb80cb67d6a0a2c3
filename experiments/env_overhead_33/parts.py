"""Where the env's own time per query step goes, on bench_env's mixed workload (565 Spider dev questions, per
question a non-matching query then the gold SQL: 1,130 query steps), with SQLite taken out: each step's
`Sandbox.execute` returns the result computed beforehand, so only the env's own work is timed.

`base`: microseconds per query step (per question the minimum over 12 rounds, summed, over 1,130).
Each other entry: how much `base` falls when that one function is replaced by a constant stub (the cost of
that part of a step, its call included). JSON to stdout.

    .venv/bin/python experiments/env_overhead_33/parts.py > experiments/env_overhead_33/parts.json
"""
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
import bench_env  # noqa: E402
import sqlenv.env.environment as E  # noqa: E402
from sqlenv.data.spider import load_spider  # noqa: E402
from sqlenv.env import prompts, rewards  # noqa: E402

spider = REPO.parent / "shared" / "spider"
questions = load_spider(spider).questions
env = E.SQLEnv(spider / "database", E.EnvConfig(step_budget=10**9))
golds = []
for q in questions:
    env.reset(q)
    golds.append(env.gold.rows)
workload = [[sql, q.gold_sql] for (sql, _), q in zip(bench_env._nonmatching_sql(env, questions, golds), questions)]
results = {}
for q, sqls in zip(questions, workload):
    env.reset(q)
    for sql in sqls:
        results[(q.db_id, sql)] = env.sandbox.execute(sql)
steps = sum(len(w) for w in workload)


def per_step_us(rounds: int = 12) -> float:
    best = [float("inf")] * len(questions)
    for _ in range(rounds):
        for i, (q, sqls) in enumerate(zip(questions, workload)):
            env.reset(q)
            box = env.sandbox
            box.execute = lambda sql, db=q.db_id: results[(db, sql)]
            start = time.perf_counter()
            for sql in sqls:
                env.step("query", {"sql": sql})
            best[i] = min(best[i], time.perf_counter() - start)
            del box.execute
    return sum(best) / steps * 1e6


STUBS = {
    "render_result": (prompts, "render_result", lambda result, rows, chars: "x"),
    "SeenResults.add_if_new": (rewards.SeenResults, "add_if_new", lambda self, rows: True),
    "call_key": (rewards, "call_key", lambda tool, args: ("query", "")),
    "repeat_penalty": (rewards, "repeat_penalty", lambda key, recent, cfg: 0.0),
    "_check_arguments": (E, "_check_arguments", lambda tool, args, params: (args, None)),
    "bound": (rewards, "bound", lambda components, cfg: 0.0),
    "operational": (rewards, "operational", lambda new, cfg: -0.01),
}


def main() -> None:
    base = per_step_us()
    out = {"query_steps": steps, "base_us_per_step": round(base, 3), "cost_us_per_step": {}}
    for name, (owner, attr, stub) in STUBS.items():
        original = getattr(owner, attr)
        setattr(owner, attr, stub)
        try:
            out["cost_us_per_step"][name] = round(base - per_step_us(), 3)
        finally:
            setattr(owner, attr, original)
    out["rest_us_per_step"] = round(base - sum(out["cost_us_per_step"].values()), 3)
    out["base_again_us_per_step"] = round(per_step_us(), 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
