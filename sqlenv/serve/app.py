"""`sqlenv serve`: the OpenEnv server of the SQL environment, started by the command itself (uvicorn).

    sqlenv serve [--data data] [--split n200] [--host 127.0.0.1] [--port 8000] [--max-sessions 8]
                 [--session-timeout 600] [--web]

OpenEnv's `create_app` gives the HTTP and WebSocket endpoints (`/reset`, `/step`, `/state`, `/schema`, `/ws` with a
session per connection on its own thread, `/mcp` for MCP clients' `tools/list` and `tools/call`, the task API);
`max_concurrent_envs` refuses a session past `--max-sessions` with `CAPACITY_REACHED`, and the idle reaper ends a
session silent for `--session-timeout` seconds. `--web` adds the page for people at `/web` (`sqlenv.serve.web`).
`--port 0` binds a free port and prints the URL it got. SIGTERM and Ctrl-C stop the server cleanly: uvicorn
finishes, and every open session's environment (its sandboxes) is closed.
"""

from __future__ import annotations

import functools
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from sqlenv.env.environment import EnvConfig
from sqlenv.serve.environment import NAME, QuestionSet, SQLResetObservation, SQLServeEnvironment, SQLState


def build_app(questions: QuestionSet, config: EnvConfig = EnvConfig(), max_sessions: int = 8,
              session_timeout: float | None = 600.0, web: bool = False, own_sandboxes: bool = True) -> Any:  # fmt: skip
    """The FastAPI app serving `questions` (one `SQLServeEnvironment` per session)."""
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import ConcurrencyConfig

    if max_sessions < 1:
        raise ValueError(f"--max-sessions must be >= 1, got {max_sessions}")
    factory = functools.partial(SQLServeEnvironment, questions, config, own_sandboxes)
    concurrency = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout)
    common = dict(env_name=NAME, state_cls=SQLState, reset_observation_cls=SQLResetObservation)
    if not web:
        return create_fastapi_app(factory, CallToolAction, CallToolObservation, concurrency_config=concurrency,
                                  **common)  # fmt: skip
    from openenv.core.env_server.web_interface import create_web_interface_app

    from sqlenv.serve.web import build_page

    return create_web_interface_app(factory, CallToolAction, CallToolObservation, concurrency_config=concurrency,
                                    gradio_builder=functools.partial(build_page, factory), custom_tab_name="Play",
                                    custom_tab_primary=True,
                                    show_default_tab=False, title_override="sqlenv", **common)  # fmt: skip


def serve(data: str | Path, host: str = "127.0.0.1", port: int = 8000, split: str | None = None,
          max_sessions: int = 8, session_timeout: float | None = 600.0, web: bool = False,
          config: EnvConfig = EnvConfig(), out: Any = sys.stdout, own_sandboxes: bool = True) -> int:  # fmt: skip
    """Serve until SIGTERM / Ctrl-C. Prints `serving <url>` once the socket is bound (the port it got with 0)."""
    import uvicorn

    questions = QuestionSet.load(data)
    if split is not None:
        questions = QuestionSet({split: questions.split(split)}, questions.db_dir)
    app = build_app(questions, config, max_sessions, session_timeout, web, own_sandboxes)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # connections queue from the moment the URL is printed, before uvicorn accepts them
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    counts = ", ".join(f"{name} {len(qs)}" for name, qs in questions.splits.items())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))

    def stop(signum: int, frame: Any) -> None:
        # Before uvicorn takes the signals over, and after: it re-raises a signal it stopped on to the handler it
        # found, which must not be the default one (that would kill the process with the signal, not exit 0).
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    out.write(f"serving http://{shown}:{bound} ({counts} questions; up to {max_sessions} sessions"
              f"{'; page at /web' if web else ''})\n")  # fmt: skip
    out.flush()
    server.run(sockets=[sock])
    return 0
