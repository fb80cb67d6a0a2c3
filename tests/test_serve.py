"""`sqlenv serve`: a real server subprocess on a fixture data folder. Guards the README's client snippet, the served
tool list (= the TRL adapter's), that no served byte holds a gold SQL, gold answer or file path, that bad input gets
a clear error while the server keeps serving, that sessions cannot slow each other, SIGTERM, and the page in a
real browser."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="the serve extra is not installed (pip install -e '.[serve]')")

from fixtures_env import make_concert_db  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from sqlenv.env.environment import EnvConfig  # noqa: E402
from sqlenv.env.trl_adapter import SQLAgentEnv, tool_methods  # noqa: E402
from sqlenv.serve.client import ServerProcess  # noqa: E402
from sqlenv.serve.environment import served_tools  # noqa: E402
from sqlenv.types import Question  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GOLD_SQL = "SELECT name FROM singer WHERE country = 'France' AND age > 30 ORDER BY name"
GOLD_ANSWER = "John Nizinik, Rose White"


def write_data(root: Path) -> Path:
    """A prepared data folder (questions/<split>.jsonl, databases/) with a runaway-friendly table."""
    make_concert_db(root / "databases")
    questions = [
        Question(id="concert_q1", db_id="concert", question="Which French singers are older than 30?", gold_sql=GOLD_SQL,
                 gold_answer=GOLD_ANSWER, ordered=True, hardness="medium"),  # fmt: skip
        Question(id="concert_q2", db_id="concert", question="How many concerts were there?",
                 gold_sql="SELECT count(*) FROM concert", hardness="easy"),  # fmt: skip
    ]
    (root / "questions").mkdir(parents=True)
    with open(root / "questions" / "n50.jsonl", "w") as f:
        for q in questions:
            f.write(json.dumps(q.to_dict()) + "\n")
    return root


def Server(data: Path, *args: str) -> ServerProcess:
    """`sqlenv serve --port 0` on `data`, its stderr kept beside the data for a failing test to read."""
    return ServerProcess(data, *args, log=data.parent / f"serve-{time.monotonic_ns()}.log")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("serve") / "data")


@pytest.fixture(scope="module")
def server(data):
    srv = Server(data, "--max-sessions", "3", "--session-timeout", "60", "--timeout", "1")
    yield srv
    assert srv.stop() == 0  # SIGTERM: a clean stop


def send(ws, message: dict | str) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def call(ws, tool: str, **arguments) -> dict:
    return send(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": tool, "arguments": arguments}})


def test_served_tools_are_the_trl_adapters():
    """What a served client lists is what TRL shows a model: name, description and parameters of each tool."""
    from transformers.utils import get_json_schema

    trl = {s["function"]["name"]: s["function"] for s in map(get_json_schema, tool_methods(SQLAgentEnv()))}
    served = {t.name: t for t in served_tools(EnvConfig())}
    assert served.keys() == trl.keys() == {"describe", "sample", "query", "answer"}
    for name, tool in served.items():
        assert tool.description == trl[name]["description"] and tool.input_schema == trl[name]["parameters"]


def test_the_readme_client_snippet_plays_an_episode(server):
    """The README's snippet, run as a user would run it against a real server."""
    text = README.read_text()
    snippet = re.search(r"```python\n(from sqlenv\.serve\.client.*?)```", text, flags=re.S).group(1)
    snippet = snippet.replace("http://127.0.0.1:8000", server.url)
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Tables in the database" in out.stdout and "True" in out.stdout, out.stdout


def test_no_served_byte_holds_gold_or_paths(server, data):
    served = []
    with connect(server.ws) as ws:
        for message in ({"type": "reset", "data": {"question_id": "concert_q1"}},
                        {"type": "step", "data": {"type": "list_tools"}},
                        {"type": "step", "data": {"type": "call_tool", "tool_name": "describe",
                                                  "arguments": {"table_name": "singer"}}},
                        {"type": "step", "data": {"type": "call_tool", "tool_name": "query",
                                                  "arguments": {"sql": "SELECT count(*) FROM singer"}}},
                        {"type": "step", "data": {"type": "call_tool", "tool_name": "answer",
                                                  "arguments": {"value": "nobody"}}},
                        {"type": "state"}):  # fmt: skip
            ws.send(json.dumps(message))
            served.append(ws.recv(timeout=30))
    import urllib.request

    def fetch(path: str, body: dict | None = None) -> str:
        request = urllib.request.Request(server.url + path, data=None if body is None else json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})  # fmt: skip
        return urllib.request.urlopen(request, timeout=30).read().decode()

    served += [fetch("/sqlenv/splits"), fetch("/sqlenv/tasks", {"split": "n50"}),
               fetch("/sqlenv/task", {"split": "n50", "index": 0}), fetch("/schema"), fetch("/metadata"),
               fetch("/mcp", {"jsonrpc": "2.0", "method": "tools/list", "id": 1, "params": {}})]  # fmt: skip
    assert "Which French singers are older than 30?" in served[-5] and '"name":"answer"' in served[-1].replace(" ", "")
    everything = "\n".join(served)
    assert '"verdict":"wrong"' in everything.replace(" ", "")  # the episode was played to its end
    for secret in (GOLD_SQL, GOLD_ANSWER, "John Nizinik", str(data), str(data.parent), "concert.sqlite"):
        assert secret not in everything, secret


def test_bad_input_gets_a_clear_error_and_the_server_keeps_serving(server, data):
    db = data / "databases" / "concert" / "concert.sqlite"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    replies = {}
    with connect(server.ws, max_size=None) as ws:
        replies["malformed JSON"] = send(ws, "{not json")
        replies["unknown message type"] = send(ws, {"type": "dance"})
        replies["a call before reset"] = call(ws, "describe", table_name="singer")
        replies["unknown question"] = send(ws, {"type": "reset", "data": {"question_id": "nope"}})
        replies["index out of range"] = send(ws, {"type": "reset", "data": {"split": "n50", "index": 99}})
        send(ws, {"type": "reset", "data": {"question_id": "concert_q2"}})
        replies["unknown tool"] = call(ws, "drop_table", name="singer")
        replies["wrong argument type"] = call(ws, "describe", table_name=["singer"])
        replies["missing argument"] = call(ws, "query")
        replies["1 MB SQL string"] = call(ws, "query", sql="SELECT " + "1+" * 500_000 + "1")
        replies["a write statement"] = call(ws, "query", sql="DELETE FROM singer")
        replies["answer"] = call(ws, "answer", value="3")
        replies["a call after the episode ended"] = call(ws, "describe", table_name="singer")
        alive = call(ws, "describe", table_name="concert")
    errors = {k: v for k, v in replies.items() if v["type"] == "error"}
    assert set(errors) == {"malformed JSON", "unknown message type", "unknown question", "index out of range"}
    assert "no question with id 'nope'" in errors["unknown question"]["data"]["message"]
    observations = {k: v["data"]["observation"] for k, v in replies.items() if k not in errors}
    assert observations["a call before reset"]["error"]["message"] == "no episode: call reset first"
    assert observations["unknown tool"]["error"]["error_type"] == "tool_not_found"
    for key in ("wrong argument type", "missing argument", "1 MB SQL string", "a write statement",
                "a call after the episode ended"):  # fmt: skip
        assert observations[key]["result"].startswith("Error: "), (key, observations[key]["result"][:200])
    assert replies["a call after the episode ended"]["data"]["reward"] < 0  # penalised, as in training
    assert alive["data"]["observation"]["result"].startswith("Error: ")  # still the ended episode, still served
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    for key, reply in replies.items():  # the table of the closing note: what the server answered
        data = reply["data"]
        shown = data.get("message") if reply["type"] == "error" else (data["observation"].get("error") or
                                                                      {"result": data["observation"].get("result")})  # fmt: skip
        print(f"| {key} | {reply['type']} | {json.dumps(shown, default=str)[:150]} |")


def test_capacity_is_refused_with_capacity_reached(server):
    sockets = [connect(server.ws) for _ in range(3)]  # --max-sessions 3
    try:
        for ws in sockets:
            assert send(ws, {"type": "reset", "data": {"split": "n50", "index": 0}})["type"] == "observation"
        with connect(server.ws) as extra:  # refused on arrival: the error comes before anything is sent
            reply = json.loads(extra.recv(timeout=30))
        assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED", reply
    finally:
        for ws in sockets:
            ws.close()
    deadline = time.monotonic() + 10  # closed sessions free their slots
    while True:
        try:
            with connect(server.ws) as again:
                if send(again, {"type": "reset", "data": {}})["type"] == "observation":
                    break
        except Exception:  # noqa: BLE001 - refused while the closed sessions are still being released
            pass
        assert time.monotonic() < deadline, "closed sessions did not free their slots"
        time.sleep(0.2)


def test_a_runaway_query_never_slows_another_session(server):
    """One session runs a query that hits the 1 s budget; another, meanwhile, runs fast queries: none of them waits
    or times out (each session has its own sandboxes)."""
    runaway_sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    result = {}
    with connect(server.ws) as slow, connect(server.ws) as fast:
        send(slow, {"type": "reset", "data": {"question_id": "concert_q2"}})
        send(fast, {"type": "reset", "data": {"question_id": "concert_q2"}})
        thread = threading.Thread(target=lambda: result.setdefault("runaway", call(slow, "query", sql=runaway_sql)))
        thread.start()
        time.sleep(0.2)
        times = []
        for _ in range(8):
            start = time.perf_counter()
            reply = call(fast, "query", sql="SELECT count(*) FROM singer")
            times.append(time.perf_counter() - start)
            assert "timed out" not in reply["data"]["observation"]["result"]
        thread.join()
    assert "timed out" in result["runaway"]["data"]["observation"]["result"]
    assert max(times) < 0.8, times  # a shared sandbox made the first one wait out the runaway's budget


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_page_plays_an_episode_in_a_real_browser(data, tmp_path):
    from playwright.sync_api import sync_playwright

    srv = Server(data, "--web")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"])  # fmt: skip
            page = browser.new_page(viewport={"width": 1200, "height": 1300})
            page.goto(srv.url + "/web/", timeout=60_000)
            page.locator("#start").click()
            page.get_by_text("Tables in the database").first.wait_for(timeout=30_000)
            for tool, argument, shown in (("describe", "singer", "singer_id INTEGER"),
                                          ("query", GOLD_SQL, "(2 rows)"), ("answer", GOLD_ANSWER, "Verdict:")):  # fmt: skip
                page.locator("#tool").get_by_text(tool, exact=True).click()
                page.locator("#argument textarea").fill(argument)
                page.locator("#call").click()
                page.get_by_text(shown).first.wait_for(timeout=30_000)
            status = page.locator("#status").inner_text()
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            browser.close()
    finally:
        assert srv.stop() == 0
    assert status.startswith("Verdict: correct") and "correctness +1.000" in status, status
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_trl_trains_against_a_running_server(data, tmp_path):
    """A TRL user's path: `GRPOTrainer(environment_factory=partial(RemoteSQLAgentEnv, url))` against a real server —
    one real training step of a tiny random model, then a scripted rollout whose reward equals the in-process one."""
    import functools
    import os

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from sqlenv.env import prompts
    from sqlenv.serve.client import RemoteSQLAgentEnv
    from sqlenv.train.tiny_model import build_tiny_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    srv = Server(data)
    try:
        tiny = build_tiny_model(tmp_path / "tiny")
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
        question = "How many concerts were there?"
        row = {"id": "concert_q2", "prompt": [{"role": "system", "content": prompts.SYSTEM_PROMPT},
                                              prompts.user_message(Question("concert_q2", "concert", question, ""))]}  # fmt: skip
        args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2,
                          max_steps=1, max_completion_length=256, max_tool_calling_iterations=4, report_to=[],
                          use_cpu=True, save_strategy="no", bf16=False, logging_steps=1)  # fmt: skip
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=Dataset.from_list([row] * 2),
                              environment_factory=functools.partial(RemoteSQLAgentEnv, srv.url))  # fmt: skip
        trainer.train()
        assert trainer.state.global_step == 1
        assert any("rewards/RemoteSQLAgentEnv/mean" in h for h in trainer.state.log_history)

        # Scripted turns through TRL's own tool loop: the server's episode pays what the in-process one pays.
        turns = ['<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT count(*) FROM concert"}}\n</tool_call>'
                 "<|im_end|>", '<tool_call>\n{"name": "answer", "arguments": {"value": "3"}}\n</tool_call><|im_end|>',
                 prompts.FINAL_REPLY + "<|im_end|>"]  # fmt: skip
        calls = {"n": 0}

        def generate(prompt_ids, *args, **kwargs):
            text = turns[min(calls["n"], len(turns) - 1)]
            calls["n"] += 1
            return [tokenizer(text, add_special_tokens=False).input_ids for _ in prompt_ids], None

        trainer._generate_single_turn = generate
        trainer.model.train()
        trainer._metrics["train"].clear()
        trainer._generate_and_score_completions([row, row])
        remote = trainer._metrics["train"]["rewards/RemoteSQLAgentEnv/mean"][-1]
    finally:
        assert srv.stop() == 0
    from sqlenv.env.trl_adapter import SQLAgentEnv

    local = SQLAgentEnv(data / "databases")
    local.reset(id="concert_q2", db_id="concert", question=question, gold_sql="SELECT count(*) FROM concert")
    local.query(sql="SELECT count(*) FROM concert")
    local.answer(value="3")
    assert remote == pytest.approx(local.get_reward()) and local.get_reward() > 1.0


def test_the_hub_package_validates_and_its_app_serves(data):
    """envs/sqlenv: OpenEnv's static validation passes, and the app its openenv.yaml names (`server.app:app`) is
    sqlenv's server over $SQLENV_DATA. (The Docker image itself cannot be built on machines without a Docker engine.)"""
    package = ROOT / "envs" / "sqlenv"
    exe = Path(sys.executable).parent / "openenv"
    report = subprocess.run([str(exe), "validate", str(package), "--level", "static", "--json"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert json.loads(report.stdout)["verdict"].lower() == "pass"
    probe = ("from fastapi.testclient import TestClient\nfrom server.app import app\n"
             "c = TestClient(app)\nprint(c.get('/health').json()['status'], c.get('/sqlenv/splits').json())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], cwd=package, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SQLENV_DATA": str(data), "ENABLE_WEB_INTERFACE": "false",
                              "PYTHONPATH": f"{package}{os.pathsep}{ROOT}"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("healthy") and "n50" in out.stdout


def test_an_idle_session_is_reaped_and_frees_its_slot(data):
    """--session-timeout: a session silent past it is closed (OpenEnv's reaper checks every 5 s at the earliest), and
    its slot goes to the next client."""
    srv = Server(data, "--max-sessions", "1", "--session-timeout", "1")
    try:
        with connect(srv.ws) as idle:
            assert send(idle, {"type": "reset", "data": {}})["type"] == "observation"
            deadline, reply = time.monotonic() + 20, None
            while time.monotonic() < deadline:
                time.sleep(1.0)
                try:
                    with connect(srv.ws) as other:
                        reply = send(other, {"type": "reset", "data": {}})
                except Exception:  # noqa: BLE001 - refused at capacity: the idle one still holds the slot
                    continue
                if reply["type"] == "observation":
                    break
            assert reply is not None and reply["type"] == "observation", reply
    finally:
        assert srv.stop() == 0


def test_a_session_owns_its_sandboxes_and_closing_it_closes_them(data):
    """Two sessions on one database never share a sandbox (so neither waits for the other's statements), and the end
    of a session (OpenEnv calls `close()` on close, disconnect, idle reaping and shutdown) closes its own."""
    import sqlite3

    from sqlenv.serve.environment import QuestionSet, SQLServeEnvironment

    questions = QuestionSet.load(data)
    one, two = SQLServeEnvironment(questions), SQLServeEnvironment(questions)
    one.reset(question_id="concert_q2")
    two.reset(question_id="concert_q2")
    box_one, box_two = one._agent._env.sandbox, two._agent._env.sandbox
    assert box_one is not box_two
    one.close()
    with pytest.raises(sqlite3.ProgrammingError):
        box_one._conn.execute("SELECT 1")  # closed with its session
    assert box_two.execute("SELECT count(*) FROM singer").rows == [(5,)]  # the other session's is untouched
    two.close()
