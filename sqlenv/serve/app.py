"""`sqlenv serve`: the OpenEnv server of the SQL environment, started by the command itself (uvicorn).

    sqlenv serve [--data data] [--split n200] [--host 127.0.0.1] [--port 8000] [--max-sessions 8]
                 [--session-timeout 600] [--web]

OpenEnv's `create_fastapi_app` gives the endpoints (`/ws` with a session per connection on its own thread, `/mcp`
for MCP clients' `tools/list` and `tools/call` over HTTP or a WebSocket session, `/schema`, `/metadata`, the task
API), in its production mode: the stateless HTTP `/reset`, `/step` and `/state` (an environment per request,
outside the session count, no episode across requests) are not served. `sqlenv.serve.sessions` counts every
session — sockets and `--web` pages alike — against `--max-sessions` (the next one is refused with
`CAPACITY_REACHED`) and closes a session silent for `--session-timeout` seconds, telling its client
`SESSION_EXPIRED`. `--web` mounts the page for people at `/web` (`sqlenv.serve.web`) itself, without OpenEnv's web
interface and its `/web/reset` and `/web/step` on one environment shared by every caller. The task API answers an
unknown split or index with 404 and the reason. `--port 0` binds a free port and prints the URL it got. SIGTERM
and Ctrl-C stop the server cleanly: uvicorn finishes, and every open session's environment (its sandboxes) is
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from sqlenv.env.environment import EnvConfig
from sqlenv.serve.environment import (
    NAME,
    QuestionSet,
    SQLResetObservation,
    SQLServeEnvironment,
    SQLState,
    TaskNotFound,
)
from sqlenv.serve.sessions import SessionGate, SessionLimit


def build_app(questions: QuestionSet, config: EnvConfig = EnvConfig(), max_sessions: int = 8,
              session_timeout: float | None = 600.0, web: bool = False, own_sandboxes: bool = True) -> Any:  # fmt: skip
    """The FastAPI app serving `questions` (one `SQLServeEnvironment` per session, at most `max_sessions` of them,
    each closed after `session_timeout` idle seconds; None: never)."""
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import ConcurrencyConfig, ServerMode

    limit = SessionLimit(max_sessions, session_timeout)
    factory = functools.partial(SQLServeEnvironment, questions, config, own_sandboxes)
    # OpenEnv's own count stays as a second line behind the gate (which refuses first), and its idle reaper stays
    # off: it would close a /ws session's environment without telling the socket (the gate expires it and says so).
    concurrency = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=None)
    app = create_fastapi_app(factory, CallToolAction, CallToolObservation, concurrency_config=concurrency,
                             env_name=NAME, state_cls=SQLState, reset_observation_cls=SQLResetObservation,
                             mode=ServerMode.PRODUCTION)  # fmt: skip

    async def task_not_found(request: Any, exc: Exception) -> Any:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    app.add_exception_handler(TaskNotFound, task_not_found)  # OpenEnv's task API turns anything else into a 500
    closers = []
    if web:
        from sqlenv.serve.web import mount_page

        closers.append(mount_page(app, factory, limit, list(questions.splits)))
    lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def with_reaper(app_: Any) -> Any:
        reaper = asyncio.create_task(limit.run_reaper())
        try:
            async with lifespan(app_) as state:
                yield state
        finally:
            reaper.cancel()
            for close in closers:
                close()  # the page sessions' environments; socket sessions close with their connections

    app.router.lifespan_context = with_reaper
    app.add_middleware(SessionGate, limit=limit)
    app.state.session_limit = limit
    return app


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
