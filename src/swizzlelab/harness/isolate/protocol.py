"""Messages between the trusted parent and the isolated child: length-prefixed JSON frames over two pipes.

The parent never unpickles or evaluates anything the child sends; frames are bounded and read with a deadline.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
MAX_CHILD_FRAME = 1 << 20  # a child message larger than this is a protocol violation


class ProtocolError(Exception):
    """The child broke the protocol: closed its pipe, sent garbage or an oversized frame."""


class Timeout(Exception):
    """No complete frame arrived before the deadline."""


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one frame (blocking)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    data = HEADER.pack(len(body)) + body
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise Timeout()
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ProtocolError("the child closed its result pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None, max_bytes: int = MAX_CHILD_FRAME) -> dict[str, Any]:
    """Read one frame; Timeout past `deadline` (time.monotonic), ProtocolError on a closed pipe or bad frame."""
    (length,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if length > max_bytes:
        raise ProtocolError(f"a message of {length} bytes (limit {max_bytes})")
    body = _read_exact(fd, length, deadline)
    try:
        message = json.loads(body)
    except ValueError:
        raise ProtocolError("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message that is not a JSON object")
    return message
