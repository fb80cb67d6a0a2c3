"""`sqlenv serve` under load, on loopback only: many concurrent WebSocket sessions playing whole oracle episodes, and
a runaway query beside fast ones.

1. **load**: a `sqlenv serve` subprocess on 127.0.0.1; `--sessions` client threads (default 32), each its own
   WebSocket session, play oracle episodes (describe the gold tables, query the gold SQL, answer its result:
   `sqlenv.data.oracle`) over the questions of `--split`, round robin, for `--seconds` (default 60). Every served
   verdict and reward is compared with the same episode played in-process (`oracle.play` on `SQLEnv`). Reports
   errors, mismatches, episodes per second and the p50/p99 latency of one step (send to reply).
2. **isolation**: one session runs a runaway query (it stops at the statement budget, `--timeout`, default 2 s) over
   and over while 8 sessions run a fast query each, for `--isolation-seconds`; once with per-session sandboxes (the
   server's default) and once with `--shared-sandboxes` (one sandbox per database for all sessions, as in-process
   training has it). Reports the fast queries' timeouts and latency: with a shared sandbox they wait behind the
   runaway; before the sandbox's budget started at the statement (not at the wait) they also timed out
   (tests/test_sandbox.py shows that).

`--data` is a prepared folder (the pipeline's `data/`) or a Spider-format folder (`tables.json`, `database/`, its
one split `dev`); `--split` defaults to the server's default (n200 where there is one, else the folder's first),
and `--questions K` plays only the split's first K questions. Bounded in count and time, loopback only. Writes
JSON to stdout and, with `--out`, to a file.

    .venv/bin/python bench/bench_serve.py [--data data] [--split n200] [--questions K] [--sessions 32]
                                          [--seconds 60] [--out bench/results/serve.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from bench_machine import record
from websockets.sync.client import connect

from sqlenv.data.oracle import oracle_calls, play
from sqlenv.env.environment import EnvConfig, SQLEnv, shared_sandbox
from sqlenv.serve.client import ServerProcess
from sqlenv.serve.environment import QuestionSet
from sqlenv.types import db_file

RUNAWAY_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def Server(data: Path, split: str, sessions: int, timeout: float, shared: bool) -> ServerProcess:
    return ServerProcess(data, "--split", split, "--max-sessions", str(sessions), "--timeout", str(timeout),
                         *(["--shared-sandboxes"] if shared else []))  # fmt: skip


def rpc(ws, message: dict) -> tuple[dict, float]:
    start = time.perf_counter()
    ws.send(json.dumps(message))
    reply = json.loads(ws.recv(timeout=60))
    return reply, time.perf_counter() - start


def call(tool: str, arguments: dict) -> dict:
    return {"type": "step", "data": {"type": "call_tool", "tool_name": tool, "arguments": arguments}}


def expected_episodes(questions: QuestionSet, split: str, config: EnvConfig,
                      limit: int | None = None) -> dict[str, dict]:  # fmt: skip
    """Per question (the split's first `limit`): the oracle's calls and the verdict and reward of playing them
    in-process."""
    env, out = SQLEnv(questions.db_dir, config), {}
    for q in list(questions.split(split))[:limit]:
        calls = oracle_calls(q, shared_sandbox(db_file(questions.db_dir, q.db_id), config.limits), config=config)
        episode = play(env, q, calls)
        out[q.id] = {"calls": calls, "correct": episode.correct, "reward": episode.reward}
    return out


def load(server: Server, expected: dict[str, dict], sessions: int, seconds: float) -> dict:
    ids = list(expected)
    counter, lock = iter(range(10**9)), threading.Lock()
    latencies: list[float] = []
    stats = {"episodes": 0, "errors": 0, "mismatches": 0, "mismatch_examples": []}
    deadline = time.monotonic() + seconds

    def worker() -> None:
        mine, steps = {"episodes": 0, "errors": 0, "mismatches": 0}, []
        try:
            with connect(server.ws, max_size=None) as ws:
                while time.monotonic() < deadline:
                    with lock:
                        qid = ids[next(counter) % len(ids)]
                    want = expected[qid]
                    reply, took = rpc(ws, {"type": "reset", "data": {"question_id": qid}})
                    steps.append(took)
                    last = reply
                    for tool, arguments in want["calls"]:
                        if reply["type"] != "observation":
                            break
                        last, took = rpc(ws, call(tool, arguments))
                        steps.append(took)
                    if last["type"] != "observation":
                        mine["errors"] += 1
                        continue
                    observation = last["data"]["observation"]
                    verdict = observation.get("metadata", {}).get("verdict")
                    total = observation.get("metadata", {}).get("reward_total")
                    if verdict != ("correct" if want["correct"] else "wrong") or abs(total - want["reward"]) > 1e-9:
                        mine["mismatches"] += 1
                        if len(stats["mismatch_examples"]) < 5:
                            stats["mismatch_examples"].append({"id": qid, "served": [verdict, total],
                                                               "in_process": [want["correct"], want["reward"]]})  # fmt: skip
                    mine["episodes"] += 1
        except Exception as exc:  # noqa: BLE001 - counted, and named in the JSON
            mine["errors"] += 1
            stats.setdefault("exceptions", []).append(repr(exc)[:200])
        with lock:
            for key in ("episodes", "errors", "mismatches"):
                stats[key] += mine[key]
            latencies.extend(steps)

    threads = [threading.Thread(target=worker) for _ in range(sessions)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {**stats, "sessions": sessions, "wall_s": round(wall, 2), "steps": len(latencies),
            "episodes_per_s": round(stats["episodes"] / wall, 2), "step_latency_ms": {
                "p50": round(1000 * quantiles[49], 2), "p99": round(1000 * quantiles[98], 2),
                "max": round(1000 * max(latencies), 2)}}  # fmt: skip


def isolation(server: Server, question_id: str, table: str, seconds: float, fast_sessions: int = 8) -> dict:
    stop = threading.Event()
    runaway = {"statements": 0, "timed_out": 0}
    fast = {"queries": 0, "timed_out": 0, "latencies": []}
    lock = threading.Lock()

    def slow() -> None:
        with connect(server.ws) as ws:
            rpc(ws, {"type": "reset", "data": {"question_id": question_id}})
            while not stop.is_set():
                reply, _ = rpc(ws, call("query", {"sql": RUNAWAY_SQL}))
                runaway["statements"] += 1
                runaway["timed_out"] += "timed out" in str(reply["data"]["observation"].get("result"))
                rpc(ws, {"type": "reset", "data": {"question_id": question_id}})  # a fresh step budget

    def quick() -> None:
        with connect(server.ws) as ws:
            rpc(ws, {"type": "reset", "data": {"question_id": question_id}})
            n = 0
            while not stop.is_set():
                reply, took = rpc(ws, call("query", {"sql": f"SELECT count(*) FROM {table}"}))
                with lock:
                    fast["queries"] += 1
                    fast["latencies"].append(took)
                    fast["timed_out"] += "timed out" in str(reply["data"]["observation"].get("result"))
                n += 1
                if n % 10 == 0:
                    rpc(ws, {"type": "reset", "data": {"question_id": question_id}})

    threads = [threading.Thread(target=slow)] + [threading.Thread(target=quick) for _ in range(fast_sessions)]
    threads[0].start()
    time.sleep(0.5)
    for t in threads[1:]:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    lat = sorted(fast.pop("latencies"))
    q = statistics.quantiles(lat, n=100)
    return {"runaway": runaway, "fast": {**fast, "fast_sessions": fast_sessions,
            "latency_ms": {"p50": round(1000 * q[49], 2), "p99": round(1000 * q[98], 2),
                           "max": round(1000 * lat[-1], 2)}}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data"), help="prepared data folder (default data/)")
    parser.add_argument("--split", help="the split to play (default: n200 where there is one, else the first)")
    parser.add_argument("--questions", type=int, help="play only the split's first K questions (default: all)")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--isolation-seconds", type=float, default=15.0)
    parser.add_argument("--timeout", type=float, default=2.0, help="statement budget of the server (default 2 s)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (1 <= args.sessions <= 256 and 0 < args.seconds <= 600 and 0 < args.isolation_seconds <= 120):
        raise SystemExit("bench_serve: keep --sessions in [1, 256] and the durations bounded (<= 600 s, <= 120 s)")
    if args.questions is not None and args.questions < 1:
        raise SystemExit(f"bench_serve: --questions must be >= 1, got {args.questions}")
    try:
        questions = QuestionSet.load(args.data)
        args.split = args.split or questions.default_split
        questions.split(args.split)
    except ValueError as exc:  # neither a prepared nor a Spider folder; a split it does not have
        raise SystemExit(f"bench_serve: {exc}") from exc
    config = EnvConfig(sql_timeout_s=args.timeout)
    expected = expected_episodes(questions, args.split, config, args.questions)
    result = {**record(), "split": args.split, "questions": len(expected), "statement_budget_s": args.timeout}
    server = Server(args.data, args.split, args.sessions + 1, args.timeout, shared=False)
    try:
        result["load"] = load(server, expected, args.sessions, args.seconds)
    finally:
        result["load"]["server_exit"] = server.stop()
    first = next(q for q in questions.splits[args.split] if q.id in expected)
    table = first.tables[0] if first.tables else "sqlite_master"
    result["isolation"] = {}
    for name, shared in (("own_sandboxes", False), ("shared_sandboxes", True)):
        server = Server(args.data, args.split, 16, args.timeout, shared=shared)
        try:
            result["isolation"][name] = isolation(server, first.id, table, args.isolation_seconds)
        finally:
            server.stop()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    ok = result["load"]["errors"] == 0 and result["load"]["mismatches"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
