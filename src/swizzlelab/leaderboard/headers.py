"""Security headers on every answer (pure ASGI): a Content-Security-Policy that lets pages run scripts only from this
server's own files, no framing by other sites (X-Frame-Options, frame-ancestors), no content sniffing.

The pages need no inline script (their data travels in `application/json` blocks read by static/app.js); Swagger UI
and ReDoc (/docs, /redoc) start from an inline script of FastAPI's page, so those two allow it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import MutableHeaders

Message = dict[str, Any]

POLICY = "; ".join((
    "default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "img-src 'self' data:",
    "font-src 'self' data:", "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'",
    "frame-ancestors 'none'",
))
DOCS_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'") + "; worker-src 'self' blob:"
DOCS_PATHS = ("/docs", "/redoc", "/docs/oauth2-redirect")
HEADERS = {"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP answer that does not set them itself."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Message]],
                      send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = DOCS_POLICY if scope.get("path", "") in DOCS_PATHS else POLICY

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in {"Content-Security-Policy": policy, **HEADERS}.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
