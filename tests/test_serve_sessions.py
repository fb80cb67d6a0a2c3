"""`sqlenv serve`'s sessions end when they end: a reaped socket session is closed for its client with SESSION_EXPIRED
and frees its slot, page sessions count against --max-sessions and close when the browser leaves, two page users are
served concurrently, OpenEnv's paths beside /ws that would play outside the limit are off, the task API answers 4xx
with the reason, and RemoteSQLAgentEnv works on rows without a prompt."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="the serve extra is not installed (pip install -e '.[serve]')")

from bench_scripts import load_bench  # noqa: E402
from test_serve import Server, call, send, write_data  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

RUNAWAY_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
chromium = pytest.mark.skipif(shutil.which("chromium") is None,
                              reason="Debian's chromium is not installed (.ci/run installs it)")  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("sessions") / "data")


def drain(ws) -> list[dict]:
    """Every message left on `ws` until the server closes it (bounded: 30 s per message)."""
    out = []
    try:
        while True:
            out.append(json.loads(ws.recv(timeout=30)))
    except ConnectionClosed:
        return out


def take_slot(url: str, deadline_s: float = 30.0):
    """A socket session with an episode started, retried until the server has a free slot (bounded)."""
    deadline, last = time.monotonic() + deadline_s, None
    while time.monotonic() < deadline:
        ws = connect(url)
        try:
            last = send(ws, {"type": "reset", "data": {"question_id": "concert_q2"}})
        except ConnectionClosed:
            last = None
        if last is not None and last["type"] == "observation":
            return ws
        ws.close()
        time.sleep(0.25)
    raise AssertionError(f"no slot freed within {deadline_s} s; last reply {last}")


def test_a_reaped_session_is_closed_with_session_expired_and_frees_its_slot(data):
    """--session-timeout 1 with one slot: the idle session is told SESSION_EXPIRED (naming the flag) and closed; its
    slot goes to the next client, and the expired socket never plays beside it."""
    srv = Server(data, "--max-sessions", "1", "--session-timeout", "1")
    try:
        idle = connect(srv.ws)
        assert send(idle, {"type": "reset", "data": {"question_id": "concert_q2"}})["type"] == "observation"
        other = take_slot(srv.ws)  # the idle one's slot, once it expired
        try:
            idle.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "describe",
                                                          "arguments": {"table_name": "singer"}}}))  # fmt: skip
        except ConnectionClosed:
            pass  # closed already: what it was told is queued
        told = drain(idle)
        assert told and told[0]["type"] == "error", told
        assert told[0]["data"]["code"] == "SESSION_EXPIRED", told
        assert "--session-timeout" in told[0]["data"]["message"] and "reset" in told[0]["data"]["message"], told
        assert len(told) == 1, told  # nothing was played after it: the socket is closed
        assert call(other, "describe", table_name="singer")["type"] == "observation"
        other.close()
    finally:
        assert srv.stop() == 0


def test_the_client_names_the_expiry(data):
    """What a `SQLEnvClient` (and so `RemoteSQLAgentEnv`) user sees: an error naming SESSION_EXPIRED, not a lost
    episode played on."""
    from sqlenv.serve.client import SQLEnvClient

    srv = Server(data, "--max-sessions", "1", "--session-timeout", "1")
    try:
        with SQLEnvClient(base_url=srv.url).sync() as env:
            env.reset(question_id="concert_q2")
            take_slot(srv.ws).close()  # it expired (the slot was free)
            with pytest.raises(RuntimeError, match="SESSION_EXPIRED"):
                env.call("describe", table_name="singer")
    finally:
        assert srv.stop() == 0


# ----------------------------------------------------------------------------------------------- the task API
BAD_TASK_REQUESTS = [  # (path, body, status, words of the reason)
    ("/sqlenv/tasks", {"split": "nope"}, 404, "no split 'nope'"),
    ("/sqlenv/num_tasks", {"split": "nope"}, 404, "no split 'nope'"),
    ("/sqlenv/task", {"split": "nope", "index": 0}, 404, "no split 'nope'"),
    ("/sqlenv/task", {"split": "n50", "index": 99}, 404, "index 99 out of range"),
    ("/sqlenv/task", {"split": "n50", "index": -1}, 404, "index -1 out of range"),
    ("/sqlenv/task", {"split": "n50", "index": "x"}, 422, "index"),
    ("/sqlenv/task", {"split": "n50"}, 422, "index"),
    ("/sqlenv/tasks", {}, 422, "split"),
    ("/sqlenv/tasks", "{not json", 422, "JSON"),
    ("/sqlenv/tasks", {"split": "n50", "bogus": 1}, 422, "bogus"),
    ("/sqlenv/tasks", {"split": 3}, 422, "split"),
    ("/sqlenv/task_range", {"split": "nope", "start": 0, "stop": 1}, 404, "no split 'nope'"),
    ("/other/tasks", {"split": "n50"}, 404, "unknown environment"),
]


@pytest.fixture(scope="module")
def client(data):
    from fastapi.testclient import TestClient

    from sqlenv.serve.app import build_app
    from sqlenv.serve.environment import QuestionSet

    with TestClient(build_app(QuestionSet.load(data), max_sessions=2)) as c:
        yield c


@pytest.mark.parametrize(("path", "body", "status", "reason"), BAD_TASK_REQUESTS,
                         ids=[f"{p}-{json.dumps(b)}" for p, b, *_ in BAD_TASK_REQUESTS])  # fmt: skip
def test_bad_task_api_input_gets_4xx_with_the_reason(client, path, body, status, reason):
    content = body if isinstance(body, str) else json.dumps(body)
    reply = client.post(path, content=content, headers={"content-type": "application/json"})
    assert reply.status_code == status, (reply.status_code, reply.text)
    assert reason.lower() in reply.text.lower(), reply.text


def test_good_task_api_input_still_answers(client):
    assert [s["name"] for s in client.get("/sqlenv/splits").json()] == ["n50"]
    assert client.post("/sqlenv/num_tasks", json={"split": "n50"}).json() == {"num_tasks": 2}
    assert client.post("/sqlenv/task", json={"split": "n50", "index": 1}).json()["task"]["id"] == "concert_q2"
    tasks = client.post("/sqlenv/task_range", json={"split": "n50", "start": 0, "stop": 2}).json()["tasks"]
    assert [t["id"] for t in tasks] == ["concert_q1", "concert_q2"]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/reset", {}), ("POST", "/step", {"action": {"type": "list_tools"}}), ("GET", "/state", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1, "params": {}})])  # fmt: skip
def test_paths_that_would_play_outside_the_session_limit_are_off(client, method, path, body):
    """OpenEnv's stateless HTTP /reset, /step and /state build an environment per request outside --max-sessions
    (and cannot play an episode across requests); HTTP MCP sessions are a second session kind the page would not
    see. They are off: a clear 4xx, pointing at /ws."""
    reply = client.request(method, path, json=body)
    if path == "/mcp":
        error = reply.json()["error"]
        assert "/ws" in error["message"], error
    else:
        assert reply.status_code in (404, 405), (reply.status_code, reply.text)


def test_the_page_paths_that_share_one_environment_are_off(data):
    """OpenEnv's web interface adds /web/reset and /web/step on ONE environment shared by every caller, outside the
    session limit: not served (the page plays through its own counted sessions)."""
    from fastapi.testclient import TestClient

    from sqlenv.serve.app import build_app
    from sqlenv.serve.environment import QuestionSet

    with TestClient(build_app(QuestionSet.load(data), max_sessions=1, web=True)) as c:
        assert c.post("/web/reset", json={"question_id": "concert_q2"}).status_code in (404, 405)
        assert c.post("/web/step", json={"action": {"type": "list_tools"}}).status_code in (404, 405)
        assert c.get("/web/", follow_redirects=True).status_code == 200  # the page itself is there


# ------------------------------------------------------------------------------------------ RemoteSQLAgentEnv
def test_remote_env_on_rows_without_a_prompt_shows_the_question(data):
    """TRL appends reset's return to the last user message (an empty one when the dataset has no `prompt`): with no
    prompt in the row, reset returns the whole first user message (question + tables); with one, the tables only."""
    from sqlenv.serve.client import RemoteSQLAgentEnv

    srv = Server(data)
    try:
        env = RemoteSQLAgentEnv(srv.url)
        bare = env.reset(id="concert_q2")
        prompted = env.reset(id="concert_q2", prompt=[{"role": "user", "content": "How many concerts were there?"}])
        env._client.close()
    finally:
        assert srv.stop() == 0
    assert "How many concerts were there?" in bare and "Tables in the database" in bare
    assert "How many concerts were there?" not in prompted and "Tables in the database" in prompted


# --------------------------------------------------------------------------------------------- the page
# The browser the load bench drives, launched and opened the same way (one copy: bench/bench_serve_sessions.py).
_BENCH = load_bench("bench_serve_sessions")
launch, open_page = _BENCH.launch, _BENCH.open_page


def start(page) -> str:
    page.locator("#start").click()
    page.wait_for_function("() => /Episode started|Refused|Error/.test(document.querySelector('#status').innerText)",
                           timeout=30_000)  # fmt: skip
    return page.locator("#status").inner_text()


def page_call(page, tool: str, argument: str) -> None:
    page.locator("#tool").get_by_text(tool, exact=True).click()
    page.locator("#argument textarea").fill(argument)
    page.locator("#call").click()


@chromium
def test_page_sessions_count_against_the_limit_and_close_when_the_browser_leaves(data):
    """--max-sessions 1: a page's episode holds the one slot (a socket is refused with CAPACITY_REACHED); when its
    browser leaves, the slot is free again. A socket holding the slot refuses the page with a clear message."""
    from playwright.sync_api import sync_playwright

    srv = Server(data, "--web", "--max-sessions", "1")
    try:
        with sync_playwright() as p:
            browser = launch(p)
            context, page = open_page(browser, srv.url)
            assert start(page).startswith("Episode started"), page.locator("#status").inner_text()
            with connect(srv.ws) as refused:
                reply = json.loads(refused.recv(timeout=30))
            assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED", reply
            assert "page" in reply["data"]["message"], reply  # says what holds the slots
            context.close()  # the browser leaves
            holder = take_slot(srv.ws)  # its slot is freed (bounded wait)
            context, page = open_page(browser, srv.url)
            status = start(page)
            assert "CAPACITY_REACHED" in status and "--max-sessions" in status, status
            holder.close()
            context.close()
            browser.close()
    finally:
        assert srv.stop() == 0


@chromium
def test_two_page_users_are_served_concurrently(data):
    """One person's runaway query (5 s budget) is running; another person's query comes back before it ends. Served
    one at a time (Gradio's default concurrency of one per event), the second waited the runaway out."""
    from playwright.sync_api import sync_playwright

    srv = Server(data, "--web", "--timeout", "5")
    try:
        with sync_playwright() as p:
            browser = launch(p)
            (ctx_a, a), (ctx_b, b) = open_page(browser, srv.url), open_page(browser, srv.url)
            assert start(a).startswith("Episode started") and start(b).startswith("Episode started")
            page_call(a, "query", RUNAWAY_SQL)
            time.sleep(0.5)  # the runaway is running
            page_call(b, "query", "SELECT 2")
            b.get_by_text("(1 row)").first.wait_for(timeout=30_000)
            runaway_done_first = "timed out" in a.locator("#transcript").inner_text()
            a.get_by_text("timed out").first.wait_for(timeout=30_000)
            ctx_a.close()
            ctx_b.close()
            browser.close()
    finally:
        assert srv.stop() == 0
    assert not runaway_done_first, "the second user's SELECT 2 waited for the first user's runaway"
