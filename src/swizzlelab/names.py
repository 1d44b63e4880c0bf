"""The one rule for names people choose: user names, submission file names, task names and GPU types (which make
leaderboard names); used alike by the API, the web pages, the CLI and the isolated evaluator.

Names are plain ASCII from a short alphabet, so they are safe in paths, URLs, HTTP headers, logs and HTML.
"""

from __future__ import annotations

import re

from swizzlelab.errors import UserError

# fullmatch, never match with `$`: `$` also matches before a trailing newline ("evil.py\n").
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py")
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
GPU_TYPE = re.compile(r"[A-Z0-9][A-Z0-9_-]{0,31}")
SHOWN_CHARS = 80  # of a refused name in a message: enough to recognise it, never a page of text


class BadName(UserError):
    """A name outside its alphabet or length; str(err) says which rule, on one line."""


def shown(name: object) -> str:
    """A refused name as it may be printed: repr (control characters escaped), cut to SHOWN_CHARS."""
    text = repr(name)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...'"


def _check(pattern: re.Pattern[str], name: object, what: str, rule: str) -> str:
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise BadName(f"{what} {shown(name)} is not allowed: {rule}")
    return name


# User names nobody may take, in any case: the deployment admin token's own name, and names that pass for the
# service or its operators in a ranking, a log or a page.
RESERVED_USER_NAMES = frozenset({"admin", "administrator", "root", "superuser", "system", "swizzlelab", "server",
                                 "service", "operator", "moderator", "staff", "support", "security", "nobody",
                                 "anonymous", "postgres", "leaderboard", "api", "null", "none", "undefined"})


def check_user_name(name: object) -> str:
    """A new user's name: the alphabet, and not a reserved name in any case ('ADMIN' neither)."""
    _check(USER_NAME, name, "user name", "use 1-64 letters, digits, '_', '.', '-', starting with a letter or digit")
    assert isinstance(name, str)
    if name.lower() in RESERVED_USER_NAMES:
        raise BadName(f"user name {shown(name)} is reserved (it would pass for the service or its admin); "
                      "choose another")
    return name


def user_name_key(name: str) -> str:
    """What makes two user names the same: their letters whatever the case ('Alice' is 'alice')."""
    return name.lower()


def check_file_name(name: object) -> str:
    return _check(FILE_NAME, name, "file name", "use a plain name of 1-100 letters, digits, '_', '.', '-' ending "
                  "in .py, not starting with '.' or '-'")


def check_task_name(name: object) -> str:
    return _check(TASK_NAME, name, "task name", "use 1-64 letters, digits, '_', '-'")


def check_gpu_type(name: object) -> str:
    """The upper-cased GPU type ('h100' -> 'H100')."""
    upper = name.strip().upper() if isinstance(name, str) else name
    return _check(GPU_TYPE, upper, "GPU type", "use a plain name such as H100 (1-32 letters, digits, '_', '-')")


def download_name(name: str, fallback: str) -> str:
    """A name safe in a Content-Disposition header: `name` less every character outside the names' alphabet
    (rows written before these rules may hold any), or `fallback` when nothing usable is left."""
    kept = "".join(c for c in name if c.isascii() and (c.isalnum() or c in "_.-")).lstrip(".-")
    return kept[:128] or fallback
