"""Atomic file writes: a report or database is either the old version or the new one, never half.

Write to a temporary file in the same directory, fsync, then os.replace over the target.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def _create_temp(target: Path) -> tuple[int, str]:
    """An exclusive temporary file beside `target`, created as open() would (0666 under the umask, unlike
    mkstemp's 0600) or with the mode of the file it will replace."""
    while True:
        name = str(target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, target.stat().st_mode & 0o7777)
        except FileNotFoundError:
            pass
        return fd, name


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically, creating parent directories; returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = _create_temp(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 `text` to `path` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line and fsync, so that an interrupted run keeps every line already written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(line.rstrip("\n") + "\n")
        handle.flush()
        os.fsync(handle.fileno())
