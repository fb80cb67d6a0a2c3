"""The server's sessions, counted in one place: `--max-sessions` slots shared by socket sessions (`/ws`, and the
`/mcp` WebSocket) and page sessions (`/web`), each closed for its user when it idles past `--session-timeout`.

OpenEnv 0.10.0 counts only the sessions it creates, and its idle reaper destroys a `/ws` session's environment
without telling the socket: the connection stays open on a closed environment (the next call fails with an
internal error; a `reset` then plays on outside the count). So the count and the idle clock live here, around
OpenEnv's app, through the ASGI interface only:

- `SessionLimit`: the slots. `open(kind)` takes one or raises `CapacityReached` (whose message names the flag and
  what holds the slots); `close` frees it; `reap()` expires a slot idle past the timeout (no call in flight) through
  the expire callback its owner set. `run_reaper` calls `reap` every second on the server's event loop.
- `SessionGate`: ASGI middleware. A WebSocket to `/ws` or `/mcp` takes a slot before OpenEnv sees it, or is
  accepted, told `CAPACITY_REACHED` and closed. When its slot expires while the socket waits for the client,
  OpenEnv's handler is told the client left (so it closes the session's environment and sandboxes, as on any
  disconnect) and the slot is freed; the client's next message is answered `SESSION_EXPIRED` and the socket
  closed. HTTP `POST /mcp` session methods (`openenv/session/*`, sessions outside both the count and any socket)
  are refused.

What it does not do: authenticate, or limit requests that open no session (the task API, `/schema`, stateless
`tools/list`): they build a throwaway environment that opens no database.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

SOCKET_PATHS = ("/ws", "/mcp")
EXPIRED = "SESSION_EXPIRED"
CAPACITY = "CAPACITY_REACHED"


class CapacityReached(Exception):
    """Every slot is taken; the message says by whom and what to do."""


@dataclass
class Slot:
    """One session's place: its kind (`socket` or `page`), its idle clock and how to end it."""

    kind: str
    id: int
    last_active: float = field(default_factory=time.monotonic)
    busy: int = 0  # calls in flight: a session is never idle while one runs
    expire: Callable[[str], bool] | None = None  # ends the session with this message; False: it could not now


class SessionLimit:
    """`max_sessions` slots and the idle timeout (None: sessions never expire). Thread-safe: socket sessions use it
    from the event loop, page sessions from Gradio's worker threads."""

    def __init__(self, max_sessions: int, idle_timeout: float | None):
        if max_sessions < 1:
            raise ValueError(f"--max-sessions must be >= 1, got {max_sessions}")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"--session-timeout must be > 0, got {idle_timeout}")
        self.max_sessions, self.idle_timeout = max_sessions, idle_timeout
        self._slots: dict[int, Slot] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def open(self, kind: str) -> Slot:
        """A slot for a new session of `kind`; CapacityReached when all are taken."""
        with self._lock:
            if len(self._slots) >= self.max_sessions:
                held = self._counts()
                raise CapacityReached(
                    f"{CAPACITY}: the server is at capacity ({len(self._slots)} of --max-sessions "
                    f"{self.max_sessions} sessions open: {held['socket']} socket, {held['page']} page); "
                    "try again when one ends")  # fmt: skip
            slot = Slot(kind, next(self._ids))
            self._slots[slot.id] = slot
            return slot

    def close(self, slot: Slot) -> None:
        """Free the slot (idempotent)."""
        with self._lock:
            self._slots.pop(slot.id, None)

    def begin(self, slot: Slot) -> None:
        """A call of the session started (it is not idle while the call runs)."""
        with self._lock:
            slot.busy += 1

    def end(self, slot: Slot) -> None:
        """A call of the session ended: its idle clock starts again."""
        with self._lock:
            slot.busy = max(0, slot.busy - 1)
            slot.last_active = time.monotonic()

    def idle(self, slot: Slot) -> bool:
        """Whether the session has had no call in flight for longer than the timeout."""
        with self._lock:
            return (self.idle_timeout is not None and slot.busy == 0
                    and time.monotonic() - slot.last_active > self.idle_timeout)  # fmt: skip

    def counts(self) -> dict[str, int]:
        with self._lock:
            return self._counts()

    def _counts(self) -> dict[str, int]:
        kinds = [s.kind for s in self._slots.values()]
        return {"socket": kinds.count("socket"), "page": kinds.count("page"), "total": len(kinds)}

    def expiry_message(self) -> str:
        return (f"{EXPIRED}: this session was closed after {self.idle_timeout:g} s without a call "
                "(--session-timeout); its episode is over. Reconnect and reset to start a new one.")  # fmt: skip

    def reap(self) -> int:
        """Expire every slot idle past the timeout with no call in flight; returns how many ended."""
        if self.idle_timeout is None:
            return 0
        with self._lock:
            slots = [s for s in self._slots.values() if s.expire is not None]
        stale = [s for s in slots if self.idle(s)]
        ended = 0
        for slot in stale:
            if slot.expire(self.expiry_message()):  # the owner frees the slot once the session is closed
                ended += 1
        return ended

    async def run_reaper(self) -> None:
        """`reap()` every second (sooner for sub-second timeouts) until cancelled."""
        if self.idle_timeout is None:
            return
        interval = min(1.0, self.idle_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            self.reap()


def _error(message: str, code: str, **extra: Any) -> str:
    """OpenEnv's WebSocket error shape (`WSErrorResponse`): `EnvClient` raises it as `Server error: … (code: …)`."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


class SessionGate:
    """ASGI middleware: every `/ws` and `/mcp` WebSocket holds a slot of `limit` while it is open (see the module
    docstring); HTTP MCP sessions are refused; everything else passes through untouched."""

    def __init__(self, app: Callable[..., Awaitable[None]], limit: SessionLimit):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "websocket" and scope["path"].rstrip("/") in SOCKET_PATHS:
            return await self._socket(scope, receive, send)
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].rstrip("/") == "/mcp":
            return await self._http_mcp(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _socket(self, scope: dict, receive: Callable, send: Callable) -> None:
        try:
            slot = self.limit.open("socket")
        except CapacityReached as exc:
            if (await receive())["type"] == "websocket.connect":
                counts = self.limit.counts()
                await send({"type": "websocket.accept"})
                await send({"type": "websocket.send", "text": _error(str(exc), CAPACITY, active_sessions=counts[
                    "total"], max_sessions=self.limit.max_sessions)})  # fmt: skip
                await send({"type": "websocket.close", "code": 1013, "reason": "at capacity"})
            return
        loop, expired, message = asyncio.get_running_loop(), asyncio.Event(), {}
        state = {"pending": None, "expired": False, "handshaken": False}

        def expire(text: str) -> bool:
            message["text"] = text
            loop.call_soon_threadsafe(expired.set)
            return True

        slot.expire = expire

        async def gated_receive() -> dict:
            if state["expired"]:
                return {"type": "websocket.disconnect", "code": 1000}
            if state["pending"] is None:
                state["pending"] = asyncio.ensure_future(receive())
            while True:
                waiter = asyncio.ensure_future(expired.wait())
                done, _ = await asyncio.wait({state["pending"], waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if state["pending"] in done:
                    event, state["pending"] = state["pending"].result(), None
                    if event["type"] == "websocket.receive":
                        self.limit.begin(slot)
                    return event
                if self.limit.idle(slot):
                    break
                expired.clear()  # a call came in between the reaper's look and now: not idle after all
            # Idle past the timeout while waiting for the client: OpenEnv's handler hears "disconnected" and closes
            # the session's environment; the client is told why once that is done (in `_socket`, below).
            state["expired"] = True
            return {"type": "websocket.disconnect", "code": 1000}

        async def gated_send(event: dict) -> None:
            if state["expired"]:
                return  # the handler's own close after the disconnect it was told of: the gate closes the socket
            if event["type"] == "websocket.accept":
                state["handshaken"] = True
            elif event["type"] == "websocket.send":
                self.limit.end(slot)  # a reply: the call is over, the idle clock restarts
            await send(event)

        try:
            await self.app(scope, gated_receive, gated_send)
        finally:
            self.limit.close(slot)
            if state["pending"] is not None and not (state["expired"] and state["handshaken"]):
                state["pending"].cancel()
        if state["expired"] and state["handshaken"]:
            await self._tell_expired(receive, send, state["pending"], message["text"])

    async def _tell_expired(self, receive: Callable, send: Callable, pending: Any, text: str) -> None:
        """The session is closed and its slot free; its socket answers the client's next message with
        SESSION_EXPIRED and closes. Answering (rather than telling at once) keeps a request-reply client in step:
        OpenEnv's `EnvClient` reads the error as its call's reply and raises it, where an unsolicited frame would be
        dropped by its reconnect (or read as the reply to the wrong call). The socket holds no environment, and waits
        one more timeout at most."""
        pending = pending or asyncio.ensure_future(receive())
        try:
            event = await asyncio.wait_for(pending, self.limit.idle_timeout)
        except asyncio.TimeoutError:
            event = {"type": "websocket.receive"}  # nobody asked: say it anyway, then close
        if event["type"] == "websocket.disconnect":
            return
        await send({"type": "websocket.send", "text": _error(text, EXPIRED, session_timeout_s=self.limit.idle_timeout)})
        await send({"type": "websocket.close", "code": 1000, "reason": "session expired"})

    async def _http_mcp(self, scope: dict, receive: Callable, send: Callable) -> None:
        """JSON-RPC over HTTP: `openenv/session/*` would open sessions outside the count and any socket (refused);
        every other method goes on to OpenEnv with its body replayed."""
        events, body = [], b""
        while True:
            event = await receive()
            events.append(event)
            if event["type"] != "http.request":
                break
            body += event.get("body", b"")
            if not event.get("more_body", False):
                break
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            request = None
        method = request.get("method") if isinstance(request, dict) else None
        if isinstance(method, str) and method.startswith("openenv/session/"):
            reply = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -32601, "message": (
                f"{method} is off on this server: sessions over HTTP /mcp would play outside --max-sessions. "
                "Open a WebSocket session at /ws (or /mcp over WebSocket).")}}).encode()  # fmt: skip
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": reply})
            return
        replay = iter(events)

        async def replayed() -> dict:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)
