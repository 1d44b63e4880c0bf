"""What every command group shares: consoles that do not wrap piped output, printing of text a server or a
submission wrote (terminal-safe), one progress-bar layout, and option texts written once.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from swizzlelab.fmt import terminal_safe

from swizzlelab.errors import UserError

# Piped output is read by programs and pasted into issues: one record per line, never cut mid-sentence.
PIPE_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A rich console; when the stream is not a terminal, lines are never wrapped."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


def echo(text: str, nl: bool = True) -> None:
    """typer.echo for text others wrote (reports, reasons, code, names from a server): terminal escapes shown."""
    typer.echo(terminal_safe(text), nl=nl)


def plain(text: object) -> Text:
    """Text others wrote as a rich renderable (a table cell, a console line): terminal-safe, and never read as
    rich markup ('[red]' stays as typed)."""
    return Text(terminal_safe(str(text)))


def progress_bar(target: Console, transient: bool = True, label: str = "") -> Progress:
    """The one progress layout: label, bar, done/total, elapsed, what is being done now."""
    return Progress(
        TextColumn(label or "[bold]working[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"), console=target, transient=transient,
    )


# --k-dir of `simulate` and `optimize` (swizzlelab.scenario.K_DIRS).
K_DIR_HELP = ("forward (every program walks K forwards) | alternate (programs of odd waves, a wave being the programs "
              "resident at once, walk K backwards; task kernels with a K-direction switch: matmul)")


def k_dir_opt() -> Any:
    return typer.Option("forward", "--k-dir", help=K_DIR_HELP)


def wave_sync_opt() -> Any:
    return typer.Option(False, "--wave-sync", help="each wave of resident programs starts only once the previous wave "
                        "has finished (a barrier between waves; task kernels with one: matmul; simulated on the model's set-associative "
                        "L2)")


def outputs_option() -> str:
    return ("names a formula file assigns for the kernel, e.g. pid_m,pid_n (default: by the grid's rank); family "
            "specs name their own")


def split_outputs(text: str | None) -> list[str] | None:
    """'pid_m, pid_n' -> ['pid_m', 'pid_n']; None stays None."""
    return [name.strip() for name in text.split(",") if name.strip()] if text else None


_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | None, option: str) -> float | None:
    """'3m', '90s', '90', '1.5min' -> seconds (None for None); a one-line UserError naming `option` otherwise."""
    if text is None:
        return None
    raw = text.strip().lower()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number):]
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except (ValueError, KeyError):
        raise UserError(f"{option} {text!r}: give a duration such as 90s, 3m or 180") from None
    if not seconds > 0 or seconds == float("inf"):
        raise UserError(f"{option} {text!r}: give a positive, finite duration such as 90s or 3m")
    return seconds
