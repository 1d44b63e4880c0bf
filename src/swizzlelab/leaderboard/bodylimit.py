"""A streaming request-body limit (pure ASGI): counts the bytes as they arrive, chunked or not, and answers 413
as soon as a body passes its route's limit, whatever Content-Length said; the app never sees such a body.

The server buffers at most the limit (kilobytes here), never the whole upload, and reads no further.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# (path, HTTP status, reason) -> the refusal in the route's own style (JSON or a page).
Refuse = Callable[[str, int, str], Response]


class BodyLimit:
    """ASGI middleware: `limit_for(path)` bytes at most per request body; `refuse(path, status, reason)` makes the
    answer (413) for a body over it."""

    def __init__(self, app: Any, limit_for: Callable[[str], int], refuse: Refuse) -> None:
        self.app = app
        self.limit_for = limit_for
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.limit_for(path)
        # The server (h11, httptools) has refused a malformed Content-Length already; a large one is refused
        # before a byte of its body is read, and every body is counted anyway.
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            await self.refuse(path, 413, _too_large(int(length), limit))(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see that
                first: Message | None = message
                break
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self.refuse(path, 413, _too_large(None, limit))(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        await self.app(scope, _replay(first, receive), send)


def _too_large(length: int | None, limit: int) -> str:
    said = f"is {length} bytes" if length is not None else "passed the limit"
    return f"request body {said}; this route takes at most {limit} bytes"


def _replay(first: Message | None, receive: Receive) -> Receive:
    """The body read already, then the real receive (which reports a disconnect)."""
    pending = [first] if first is not None else []

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
