"""`sqlenv serve`'s session guarantees, measured on loopback: what docs/serving.md's "Sessions" section quotes.

1. **page concurrency**: two people on the `/web` page (headless Debian chromium through Playwright, two browser
   contexts). Person B's `SELECT 2` is timed from the click to the page showing its result: alone, while person A's
   runaway query (it stops at the statement budget, `--timeout`, default 2 s) is running, and while another process
   spins one core (the machine's share of a runaway's cost, without the server: on a 2-core machine a runaway takes
   half of it). `--repeats` rounds of the three, interleaved, each on fresh episodes. Reports the medians, the
   ratio beside a runaway to alone (the threshold: <= 1.5), and whether each of B's calls came back before A's
   runaway ended.
2. **capacity**: `--max-sessions 2` held by one page session and one socket session; a third session is opened as
   a socket and as a page, and what each is told is recorded (the threshold: refused, CAPACITY_REACHED, naming the
   flag).
3. **expiry**: `--max-sessions 1 --session-timeout 2`; a socket session starts an episode and goes silent. Reports
   how long until another client gets the slot, and what the silent socket's next call is answered (the threshold:
   SESSION_EXPIRED); the same for a page session (its next call's status).
4. **task API**: a table of bad inputs, each with the HTTP status and the reason the server gave (the threshold:
   every one 4xx with a reason).

Bounded in count and time, 127.0.0.1 only. Needs the serve extra and `chromium` (for 1-3's pages). Writes JSON to
stdout and, with `--out`, to a file.

    .venv/bin/python bench/bench_serve_sessions.py [--data data] [--repeats 7] [--timeout 2]
                                                   [--out bench/results/serve_sessions_<cpu>.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench_machine import record
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from sqlenv.serve.client import ServerProcess
from sqlenv.serve.environment import QuestionSet

RUNAWAY_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
BAD_TASK_REQUESTS = [  # (path, body)
    ("/sqlenv/tasks", {"split": "nope"}),
    ("/sqlenv/num_tasks", {"split": "nope"}),
    ("/sqlenv/task", {"split": "nope", "index": 0}),
    ("/sqlenv/task", {"split": "{split}", "index": 10**6}),
    ("/sqlenv/task", {"split": "{split}", "index": -1}),
    ("/sqlenv/task", {"split": "{split}", "index": "x"}),
    ("/sqlenv/task", {"split": "{split}"}),
    ("/sqlenv/tasks", {}),
    ("/sqlenv/tasks", {"split": 3}),
    ("/sqlenv/tasks", {"split": "{split}", "bogus": 1}),
    ("/sqlenv/tasks", "{not json"),
    ("/sqlenv/task_range", {"split": "nope", "start": 0, "stop": 1}),
    ("/other/tasks", {"split": "{split}"}),
]


def launch(p):
    return p.chromium.launch(executable_path=shutil.which("chromium"), args=[
        "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"])  # fmt: skip


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1200, "height": 1300})
    page = context.new_page()
    page.goto(url + "/web/", timeout=60_000)
    page.locator("#start").wait_for(timeout=60_000)
    return context, page


def status_of(page) -> str:
    return page.locator("#status").inner_text()


def wait_status(page, pattern: str, timeout_ms: int = 60_000) -> str:
    page.wait_for_function("p => new RegExp(p).test(document.querySelector('#status').innerText)", arg=pattern,
                           timeout=timeout_ms)  # fmt: skip
    return status_of(page)


def start(page) -> str:
    page.locator("#start").click()
    return wait_status(page, "Episode started|Refused|Error")


def page_call(page, tool: str, argument: str) -> None:
    page.locator("#tool").get_by_text(tool, exact=True).click()
    page.locator("#argument textarea").fill(argument)
    page.locator("#call").click()


def timed_call(page, calls_before: int, sql: str) -> float:
    """Seconds from the click to the page showing the call's result (its status counts one call more)."""
    page.locator("#tool").get_by_text("query", exact=True).click()
    page.locator("#argument textarea").fill(sql)
    t0 = time.perf_counter()
    page.locator("#call").click()
    wait_status(page, f"^{calls_before + 1} calls so far")
    return time.perf_counter() - t0


def busy_core(seconds: float) -> subprocess.Popen:
    """Another process spinning one core for `seconds`: the machine's share of a runaway's cost, without the server."""
    spin = f"import time\nt = time.perf_counter() + {seconds}\nwhile time.perf_counter() < t:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", spin])


def page_concurrency(data: Path, split: str, repeats: int, timeout: float) -> dict:
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {"alone": [], "beside_runaway": [], "beside_busy_core": []}
    back_first = []
    with ServerProcess(data, "--web", "--split", split, "--timeout", str(timeout)) as srv, sync_playwright() as p:
        browser = launch(p)
        (ctx_a, a), (ctx_b, b) = open_page(browser, srv.url), open_page(browser, srv.url)
        start(a), start(b)
        timed_call(b, 0, "SELECT 1")  # warm: the first call of a page pays one-off costs
        for _ in range(repeats):  # interleaved, each round on fresh episodes: same transcript lengths, same load
            start(a), start(b)
            times["alone"].append(timed_call(b, 0, "SELECT 2"))
            page_call(a, "query", RUNAWAY_SQL)
            time.sleep(0.3)  # A's runaway is running (it runs `timeout` seconds)
            times["beside_runaway"].append(timed_call(b, 1, "SELECT 2"))
            back_first.append("1 calls so far" not in status_of(a))
            wait_status(a, "^1 calls so far")
            spinner = busy_core(timeout)
            time.sleep(0.3)
            times["beside_busy_core"].append(timed_call(b, 2, "SELECT 2"))
            spinner.wait()
        transcript_a = a.locator("#transcript").inner_text()
        ctx_a.close(), ctx_b.close(), browser.close()
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"repeats": repeats, "statement_budget_s": timeout,
            **{f"{k}_ms": [round(1000 * t, 1) for t in v] for k, v in times.items()},
            **{f"median_{k}_ms": round(1000 * m, 1) for k, m in medians.items()},
            "ratio": round(medians["beside_runaway"] / medians["alone"], 2), "threshold_ratio": 1.5,
            "ratio_beside_busy_core": round(medians["beside_busy_core"] / medians["alone"], 2),
            "every_call_back_before_the_runaway_ended": all(back_first),
            "last_runaway_timed_out": "timed out" in transcript_a}  # fmt: skip


def socket_reset(url: str) -> tuple[object, dict]:
    ws = connect(url)
    try:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        return ws, json.loads(ws.recv(timeout=30))
    except ConnectionClosed:
        return ws, {"type": "closed"}


def capacity(data: Path, split: str) -> dict:
    from playwright.sync_api import sync_playwright

    out = {"max_sessions": 2, "held_by": ["page", "socket"]}
    with ServerProcess(data, "--web", "--split", split, "--max-sessions", "2") as srv, sync_playwright() as p:
        browser = launch(p)
        ctx, page = open_page(browser, srv.url)
        out["page_1"] = start(page)
        holder, reply = socket_reset(srv.ws)
        out["socket_2"] = reply["type"]
        with connect(srv.ws) as extra:
            refused = json.loads(extra.recv(timeout=30))
        out["socket_3"] = {"type": refused["type"], "code": refused["data"]["code"],
                           "message": refused["data"]["message"]}  # fmt: skip
        ctx3, page3 = open_page(browser, srv.url)
        out["page_3"] = start(page3)
        holder.close()
        ctx.close(), ctx3.close(), browser.close()
    out["refused_with_capacity_reached"] = (out["socket_3"]["code"] == "CAPACITY_REACHED"
                                            and "CAPACITY_REACHED" in out["page_3"])  # fmt: skip
    return out


def expiry(data: Path, split: str, session_timeout: float) -> dict:
    from playwright.sync_api import sync_playwright

    out: dict = {"max_sessions": 1, "session_timeout_s": session_timeout}
    with ServerProcess(data, "--web", "--split", split, "--max-sessions", "1",
                       "--session-timeout", str(session_timeout)) as srv:  # fmt: skip
        idle, reply = socket_reset(srv.ws)
        t0, deadline = time.monotonic(), time.monotonic() + 10 * session_timeout + 30
        while True:  # another client retries until the idle one's slot is free
            other, reply = socket_reset(srv.ws)
            if reply["type"] == "observation":
                break
            other.close()
            if time.monotonic() > deadline:
                raise SystemExit("bench_serve_sessions: the idle session's slot was never freed")
            time.sleep(0.1)
        out["slot_free_after_s"] = round(time.monotonic() - t0, 2)
        try:
            idle.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "describe",
                                                           "arguments": {"table_name": "x"}}}))  # fmt: skip
        except ConnectionClosed:
            pass
        told = json.loads(idle.recv(timeout=30))
        try:
            idle.recv(timeout=30)
            out["socket_closed_after"] = False
        except ConnectionClosed:
            out["socket_closed_after"] = True
        out["socket_next_call"] = {"type": told["type"], **{k: told["data"][k] for k in ("code", "message")}}
        other.close()
        with sync_playwright() as p:
            browser = launch(p)
            ctx, page = open_page(browser, srv.url)
            start(page)
            time.sleep(session_timeout + 2)  # the reaper looks every second
            page_call(page, "describe", "x")
            out["page_next_call"] = wait_status(page, "SESSION_EXPIRED|calls so far")
            ctx.close(), browser.close()
    out["named_error"] = (out["socket_next_call"]["code"] == "SESSION_EXPIRED"
                          and "SESSION_EXPIRED" in out["page_next_call"])  # fmt: skip
    return out


def task_api(data: Path, split: str) -> dict:
    rows = []
    with ServerProcess(data, "--split", split) as srv:
        for path, body in BAD_TASK_REQUESTS:
            text = body if isinstance(body, str) else json.dumps(body).replace("{split}", split)
            request = urllib.request.Request(srv.url + path, data=text.encode(), method="POST",
                                             headers={"content-type": "application/json"})  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    status, answer = reply.status, reply.read().decode()
            except urllib.error.HTTPError as exc:
                status, answer = exc.code, exc.read().decode()
            detail = json.loads(answer).get("detail")
            reason = detail if isinstance(detail, str) else "; ".join(
                f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail or [])  # fmt: skip
            rows.append({"path": path, "body": text, "status": status, "reason": reason})
    return {"requests": rows, "every_one_4xx_with_a_reason": all(400 <= r["status"] < 500 and r["reason"]
                                                                  for r in rows)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="prepared or Spider folder (default: a fixture database)")
    parser.add_argument("--split", help="split to serve (default: the folder's default)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=2.0, help="statement budget of the runaway (default 2 s)")
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (1 <= args.repeats <= 20 and 0 < args.timeout <= 10 and 0 < args.session_timeout <= 60):
        raise SystemExit("bench_serve_sessions: --repeats in [1, 20], --timeout in (0, 10], --session-timeout in "
                         "(0, 60]")  # fmt: skip
    if shutil.which("chromium") is None:
        raise SystemExit("bench_serve_sessions: needs Debian's chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:  # the serve tests' fixture: the concert database, two questions
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from test_serve import write_data

            data = write_data(Path(tmp) / "data")
        split = args.split or QuestionSet.load(data).default_split
        result = {**record(), "data": str(args.data or "tests/test_serve.py fixture (concert)"), "split": split}
        result["page_concurrency"] = page_concurrency(data, split, args.repeats, args.timeout)
        result["capacity"] = capacity(data, split)
        result["expiry"] = expiry(data, split, args.session_timeout)
        result["task_api"] = task_api(data, split)
    conc = result["page_concurrency"]
    result["thresholds_met"] = {
        "page call beside a runaway <= 1.5x alone": conc["ratio"] <= conc["threshold_ratio"],
        "N+1th session (page and socket mixed) refused with CAPACITY_REACHED": result["capacity"][
            "refused_with_capacity_reached"],
        "reaped session's next call gets SESSION_EXPIRED, its slot free": result["expiry"]["named_error"],
        "bad task-API input answers 4xx with the reason": result["task_api"]["every_one_4xx_with_a_reason"],
    }  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(result["thresholds_met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
