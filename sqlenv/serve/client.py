"""Clients of a running `sqlenv serve`: OpenEnv's `EnvClient` for the SQL environment, and a TRL adapter on top.

    from sqlenv.serve.client import SQLEnvClient

    with SQLEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(split="n200", index=0)
        print(first.observation.messages[-1]["content"])      # the question and the table names
        step = env.call("query", sql="SELECT count(*) FROM Car")
        print(step.observation.result)                         # what the model would see
        step = env.call("answer", value="42")
        print(step.done, step.observation.metadata["verdict"])

`SQLEnvClient` speaks OpenEnv's WebSocket protocol (one server session per client, closed with the client);
`call(tool, **arguments)` is a `CallToolAction`, `list_tools()` a `ListToolsAction`. `RemoteSQLAgentEnv` has the four
tools of `sqlenv.env.trl_adapter.SQLAgentEnv` with the same signatures and docstrings, so
`GRPOTrainer(environment_factory=partial(RemoteSQLAgentEnv, url))` trains on episodes played by the server (it holds
questions, databases and gold answers). A dataset row needs the question's `id`, and should carry its `prompt`:
the system prompt and the user message as `sqlenv.env.prompts.initial_messages` renders them without the tables
(`RemoteSQLAgentEnv.reset` returns the tables text, which TRL appends to the last user message). A row without a
`prompt` gets the whole first user message (question and tables) from `reset` instead, appended to TRL's empty
placeholder, so the model still sees the question; its system prompt is then the chat template's default, not
sqlenv's.
"""

from __future__ import annotations

import functools
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
)
from openenv.core.env_server.types import Action, Observation

from sqlenv.env.trl_adapter import SQLAgentEnv
from sqlenv.serve.environment import SQLResetObservation, SQLState


class SQLEnvClient(EnvClient[Action, Observation, SQLState]):
    """A session on a `sqlenv serve` server (async; `.sync()` for a blocking one)."""

    def _step_payload(self, action: Action) -> dict[str, Any]:
        if isinstance(action, ListToolsAction):
            return {"type": "list_tools"}
        if isinstance(action, CallToolAction):
            return {"type": "call_tool", "tool_name": action.tool_name, "arguments": action.arguments}
        raise TypeError(f"SQLEnvClient sends ListToolsAction or CallToolAction, not {type(action).__name__}")

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Observation]:
        data = dict(payload.get("observation", {}))
        common = {"done": payload.get("done", False), "reward": payload.get("reward"),
                  "metadata": data.pop("metadata", None) or payload.get("metadata") or {}}  # fmt: skip
        for key in ("done", "reward"):
            data.pop(key, None)
        observation: Observation
        if "tools" in data:
            observation = ListToolsObservation(tools=[Tool(**t) for t in data["tools"]], **common)
        elif "tool_name" in data:
            error = ToolError(**data["error"]) if data.get("error") else None
            observation = CallToolObservation(tool_name=data["tool_name"], result=data.get("result"), error=error,
                                              **common)  # fmt: skip
        else:
            observation = SQLResetObservation(**data, **common)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> SQLState:
        return SQLState(**payload)

    async def call(self, tool: str, **arguments: Any) -> StepResult[Observation]:
        """Call one tool of the episode; the result's observation is a `CallToolObservation`."""
        return await self.step(CallToolAction(tool_name=tool, arguments=arguments))

    async def list_tools(self) -> list[Tool]:
        """The server's tools with their JSON schemas (the ones TRL shows a model)."""
        result = await self.step(ListToolsAction())
        return result.observation.tools


def _remote(method: Any) -> Any:
    """A tool of `SQLAgentEnv` (same name, signature and docstring, so TRL shows the same schema) played remotely."""

    @functools.wraps(method)
    def tool(self: "RemoteSQLAgentEnv", **arguments: Any) -> str:
        return self._call(method.__name__, arguments)

    return tool


class RemoteSQLAgentEnv:
    """A SQLite database you can explore and query to answer one question."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000"):
        self._client = SQLEnvClient(base_url=base_url).sync()
        self._client.connect()
        self._reward = 0.0

    def reset(self, **row: Any) -> str:
        """Start an episode on the server's question `row["id"]`; returns what TRL appends to the row's last user
        message: the tables text when the row has a `prompt` (the rendered question), else the whole first user
        message as the server renders it (question and tables), so a row without a prompt still asks the question.

        Args:
            row: The dataset columns: `id` (required) and `prompt` (recommended: system prompt and question).

        Returns:
            The tables observation, or the first user message.
        """
        if "id" not in row:
            raise ValueError(f"RemoteSQLAgentEnv needs rows with the question's `id`; got columns {sorted(row)}")
        first = self._client.reset(question_id=row["id"]).observation
        self._reward = 0.0
        return first.observation if row.get("prompt") else first.messages[-1]["content"]

    describe = _remote(SQLAgentEnv.describe)
    sample = _remote(SQLAgentEnv.sample)
    query = _remote(SQLAgentEnv.query)
    answer = _remote(SQLAgentEnv.answer)

    def get_reward(self) -> float:
        """The episode's total reward on the server.

        Returns:
            The total reward.
        """
        return self._reward

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        result = self._client.call(tool, **arguments)
        observation = result.observation
        if getattr(observation, "error", None) is not None:
            return f"Error: {observation.error.message}"
        self._reward = float(observation.metadata["reward_total"])
        return str(observation.result)

    def __del__(self) -> None:
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter shutdown
            pass


class ServerProcess:
    """`sqlenv serve --port 0 ARGS…` in a subprocess, for a notebook, a test or a benchmark: `url` and `ws` once it
    printed the address it got; `stop()` sends SIGTERM and returns the exit status. Its stderr goes to `log` (a file:
    a pipe nobody reads would stall the server), and what else it prints is drained."""

    def __init__(self, data: str | Path, *args: str, log: Path | None = None):
        exe = Path(sys.executable).parent / "sqlenv"
        self.log = open(log, "w+") if log is not None else tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen([str(exe), "serve", "--data", str(data), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)  # fmt: skip
        line = self.proc.stdout.readline()
        match = re.search(r"serving (http://\S+)", line)
        if not match:
            self.log.seek(0)
            self.proc.kill()
            raise RuntimeError(f"sqlenv serve did not start: {line!r}\n{self.log.read()[-3000:]}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.url = match.group(1)
        self.ws = self.url.replace("http://", "ws://") + "/ws"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
            self.log.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
