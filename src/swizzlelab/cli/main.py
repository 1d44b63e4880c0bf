"""The `swizzlelab` console command: the typer app and the one place user errors become exit code 2.

Each command group is a module of this package with a `register(app)` function; library packages never import it.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from swizzlelab.cli import eval as eval_cli
from swizzlelab.cli import leaderboard as leaderboard_cli
from swizzlelab.cli import optimize as optimize_cli
from swizzlelab.cli import serve as serve_cli
from swizzlelab.cli import sim as sim_cli
from swizzlelab.cli import submit as submit_cli
from swizzlelab.cli import swizzle as swizzle_cli
from swizzlelab.cli import tasks as tasks_cli
from swizzlelab.cli import trace as trace_cli
from swizzlelab.errors import UserError
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

app = typer.Typer(
    name="swizzlelab",
    help="Find, prove and measure block-order swizzles for Triton GPU kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Find, prove and measure block-order swizzles for Triton GPU kernels."""


for _group in (swizzle_cli, trace_cli, sim_cli, tasks_cli, eval_cli, optimize_cli, serve_cli, submit_cli, leaderboard_cli):
    _group.register(app)


def main() -> None:
    """Entry point: run the app, turning a UserError into one red line and exit code 2."""
    try:
        app()
    except UserError as err:
        Console(stderr=True).print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        sys.exit(130)

