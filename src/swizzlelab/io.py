"""Files in and out: atomic writes (a report is either the old version or the new one, never half) and
importing a user's Python file as a module (one loader, one-line errors).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
import sys
from pathlib import Path
from types import ModuleType

from swizzlelab.errors import UserError


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


def module_name_for(path: str | os.PathLike[str], prefix: str) -> str:
    """A module name derived from a file's resolved path: two files never share one, the same file reuses it."""
    digest = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:12]
    return f"{prefix}_{digest}"


def load_module(path: str | os.PathLike[str], module_name: str, what: str, reuse: bool = False) -> ModuleType:
    """Import the Python file `path` as `module_name`; any failure is one UserError line starting with `what`
    (e.g. "--kernel k.py"). With `reuse`, a module already imported under that name is returned as is."""
    file = Path(path)
    if reuse and module_name in sys.modules:
        return sys.modules[module_name]
    if not file.is_file():
        raise UserError(f"{what}: no such file")
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"{what}: cannot be imported as a Python module (give a .py file)")
    module = importlib.util.module_from_spec(spec)
    # triton.jit and dataclasses look the module up in sys.modules while it executes.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # a user's file: any import error is theirs; sys.exit() never exits 0
        sys.modules.pop(module_name, None)
        first = (f"{type(err).__name__}: {err}".splitlines() or [type(err).__name__])[0]
        raise UserError(f"{what}: {first}") from None
    return module
