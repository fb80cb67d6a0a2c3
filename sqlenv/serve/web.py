"""The page for people at `/web` (`sqlenv serve --web`): pick a question, call the tools, answer, see the verdict.

A Gradio page mounted on the server's app (`mount_page`). Each browser session (Gradio's session hash) plays its own
`SQLServeEnvironment`, made by the server's factory when it starts its first episode, and is a session like any
socket: it takes one of `--max-sessions` slots (refused with `CAPACITY_REACHED` when none is free), is closed when
the browser leaves (Gradio's `unload` event) or when it idles past `--session-timeout` (`SESSION_EXPIRED` on its
next call), and its environment and sandboxes close with it. Calls of different people run at the same time
(no Gradio concurrency limit on the page's events); calls of one person run one at a time (a lock per session).
The page shows exactly what a model is shown: the system prompt, the question with the table names, and every tool
result as text; the verdict and reward appear when the episode ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
from openenv.core.env_server.mcp_types import CallToolAction

from sqlenv.serve.environment import SQLServeEnvironment
from sqlenv.serve.sessions import CapacityReached, SessionLimit, Slot

ARGUMENT = {"describe": "table_name", "sample": "table_name", "query": "sql", "answer": "value"}


@dataclass
class PageSession:
    env: SQLServeEnvironment
    slot: Slot
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class PageSessions:
    """The page's sessions by Gradio session hash, each holding a slot of the server's `SessionLimit`."""

    def __init__(self, factory: Callable[[], SQLServeEnvironment], limit: SessionLimit):
        self.factory, self.limit = factory, limit
        self._sessions: dict[str, PageSession] = {}
        self._ended: dict[str, str] = {}  # why a browser session's episode ended (expired), told on its next call
        self._lock = threading.Lock()

    def open(self, key: str) -> PageSession:
        """The browser session's page session, opened (a slot taken) on its first episode; CapacityReached."""
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                return session
            slot = self.limit.open("page")
            self._ended.pop(key, None)
        try:
            session = PageSession(self.factory(), slot)
        except BaseException:
            self.limit.close(slot)
            raise
        slot.expire = lambda message: self._expire(key, session, message)
        with self._lock:
            self._sessions[key] = session
        return session

    def get(self, key: str) -> PageSession | None:
        with self._lock:
            return self._sessions.get(key)

    def ended(self, key: str) -> str | None:
        with self._lock:
            return self._ended.get(key)

    def close(self, key: str, why: str | None = None) -> None:
        """End the browser session's page session (it left, or it expired): its environment, then its slot."""
        with self._lock:
            session = self._sessions.pop(key, None)
            if why is not None:
                self._ended[key] = why
        if session is not None:
            self._end(session)

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            self._end(session)

    def _end(self, session: PageSession) -> None:
        session.closed = True
        try:
            session.env.close()
        finally:
            self.limit.close(session.slot)

    def _expire(self, key: str, session: PageSession, message: str) -> bool:
        if not session.lock.acquire(blocking=False):
            return False  # a call is running: not idle after all
        try:
            self.close(key, why=message)
        finally:
            session.lock.release()
        return True


def _quote(text: str) -> str:
    return "\n".join("    " + line for line in str(text).splitlines()) or "    "


def _transcript(log: list[str]) -> str:
    return "\n\n".join(log) if log else "_Pick a question and start an episode._"


def build_page(sessions: PageSessions, splits: list[str], title: str = "sqlenv") -> gr.Blocks:
    """The page's blocks, playing through `sessions`."""

    def start(split: str, index: float | None, request: gr.Request) -> tuple:
        try:
            session = sessions.open(request.session_hash)
        except CapacityReached as exc:
            return [], _transcript([]), f"**Refused.** {exc}", gr.update()
        with session.lock:
            if session.closed:
                return [], _transcript([]), "**Your session just ended; start the episode again.**", gr.update()
            sessions.limit.begin(session.slot)
            try:
                first = session.env.reset(split=split, index=None if index is None else int(index))
            except ValueError as exc:
                return [], _transcript([f"**Error:** {exc}"]), "", gr.update()
            finally:
                sessions.limit.end(session.slot)
        system, user = first.messages
        log = [f"**System**\n\n{_quote(system['content'])}", f"**Question** `{first.question_id}` "
               f"(database `{first.db_id}`)\n\n{_quote(user['content'])}"]  # fmt: skip
        return log, _transcript(log), f"Episode started: question {first.index} of `{split}`.", first.index

    def call(tool: str, argument: str, log: list[str], request: gr.Request) -> tuple:
        session = sessions.get(request.session_hash)
        if session is None:
            ended = sessions.ended(request.session_hash)
            return log, _transcript(log), f"**{ended}**" if ended else "Start an episode first."
        with session.lock:
            if session.closed:
                return log, _transcript(log), f"**{sessions.ended(request.session_hash) or 'Session closed.'}**"
            env = session.env
            if env.state.question_id is None:
                return log, _transcript(log), "Start an episode first."
            sessions.limit.begin(session.slot)
            try:
                result = env.step(CallToolAction(tool_name=tool, arguments={ARGUMENT[tool]: argument}))
            finally:
                sessions.limit.end(session.slot)
            state = env.state
        log = [*log, f"**{tool}**(`{json.dumps(argument)}`)\n\n{_quote(result.result)}"]
        if state.done:
            status = (f"**Verdict: {state.verdict}** — reward {state.reward:+.3f} after {state.step_count} calls "
                      f"({', '.join(f'{k} {v:+.3f}' for k, v in state.reward_components.items() if v)}).")  # fmt: skip
        else:
            status = f"{state.step_count} calls so far; reward {state.reward:+.3f}."
        return log, _transcript(log), status

    def leave(request: gr.Request) -> None:
        sessions.close(request.session_hash)

    with gr.Blocks(title=title) as page:
        gr.Markdown("# sqlenv\nAnswer a question about a SQLite database: explore it with `describe`, `sample` and "
                    "`query`, then `answer` with the values from a query result. You see what the model sees.")  # fmt: skip
        log_state = gr.State([])
        with gr.Row():
            split = gr.Dropdown(splits, value=splits[0], label="question set", elem_id="split")
            index = gr.Number(value=0, precision=0, label="question index", elem_id="index")
            new = gr.Button("Start episode", variant="primary", elem_id="start")
        transcript = gr.Markdown(_transcript([]), elem_id="transcript")
        with gr.Row():
            tool = gr.Radio(list(ARGUMENT), value="describe", label="tool", elem_id="tool")
            argument = gr.Textbox(label="argument (table name, SQL or answer)", elem_id="argument", scale=3)
            send = gr.Button("Call", elem_id="call")
        status = gr.Markdown("", elem_id="status")
        # concurrency_limit=None: Gradio's default (1 per event) would serve everyone's calls one at a time, so one
        # person's runaway query would hold up every other person's; a session's own calls take its lock instead.
        new.click(start, [split, index], [log_state, transcript, status, index], concurrency_limit=None)
        for event in (send.click, argument.submit):
            event(call, [tool, argument, log_state], [log_state, transcript, status], concurrency_limit=None)
        page.unload(leave)
    return page


def mount_page(app: Any, factory: Callable[[], SQLServeEnvironment], limit: SessionLimit,
               splits: list[str]) -> Callable[[], None]:  # fmt: skip
    """Mount the page at `/web` on `app` (`/` and `/web` redirect to it); returns what closes its open sessions."""
    from fastapi.responses import RedirectResponse
    from openenv.core.env_server.gradio_theme import OPENENV_GRADIO_CSS, OPENENV_GRADIO_THEME

    sessions = PageSessions(factory, limit)

    @app.get("/", include_in_schema=False)
    async def root() -> Any:
        return RedirectResponse(url="/web/")

    @app.get("/web", include_in_schema=False)
    async def web() -> Any:
        return RedirectResponse(url="/web/")

    gr.mount_gradio_app(app, build_page(sessions, splits), path="/web", theme=OPENENV_GRADIO_THEME,
                        css=OPENENV_GRADIO_CSS)  # fmt: skip
    return sessions.close_all
