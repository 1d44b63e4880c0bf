"""Formatting of figures for people: bytes, rates, grids, durations. The one place each unit is written out.

Every command, log and report formats with these, so the same quantity reads the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Binary multiples labelled KB / MB / GB / TB, as the leaderboard reports (docs/formats/) print ncu's bytes.
_BYTE_UNITS = (("TB", 1024.0**4), ("GB", 1024.0**3), ("MB", 1024.0**2), ("KB", 1024.0))


def fmt_bytes(value: float) -> str:
    """Bytes with two decimals in the largest unit that keeps the number >= 1 (1 KB = 1024 bytes)."""
    number = float(value)
    for unit, scale in _BYTE_UNITS:
        if abs(number) >= scale:
            return f"{number / scale:.2f} {unit}"
    return f"{number:.0f} B"


def pct(rate: float | None) -> str:
    """A rate in 0..1 as a percentage with one decimal; 'n/a' for None."""
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def grid_text(grid: Iterable[int]) -> str:
    """(64, 32) -> '64x32'."""
    return "x".join(str(int(g)) for g in grid)


def fmt_seconds(value: float) -> str:
    """A duration for people: '42 s', '3.5 min', '2.3 h'."""
    seconds = float(value)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# What must not reach a terminal as it is: C0 controls but newline and tab (ESC starts every escape sequence: a
# clipboard write, a cleared screen, a window title; CR overwrites a line), DEL, C1 controls (CSI among them), the
# bidirectional overrides and isolates (they reorder what a reader sees) and lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_safe(text: str) -> str:
    """Text from a server or a submission as it may be printed: each unsafe character shown as its escape
    ('\\x1b', '\\u202e'), never sent."""
    return _UNSAFE.sub(lambda found: ascii(found.group())[1:-1], text)
