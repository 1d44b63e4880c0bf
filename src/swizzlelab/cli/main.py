"""The `swizzlelab` console command: the typer app and the one place user errors become exit code 2.

Each command group is a module of this package with a `register(app)` function; library packages never import it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from swizzlelab.errors import UserError
from swizzlelab.fmt import terminal_safe
from swizzlelab.runtime import select_backend

# Before any command imports triton; cheap (no torch, no triton), so `version` and `check` start fast.
select_backend()

# Command group modules of this package, and the group of each command. A run imports only the group of the
# command it was given (start-up: `check` must not pay for numba, torch or triton that `optimize` needs).
GROUPS = ("swizzle", "trace", "sim", "tasks", "eval", "optimize", "llm", "serve", "submit", "leaderboard")
COMMANDS = {
    "version": "swizzle", "check": "swizzle", "families": "swizzle", "trace": "trace", "analyze": "sim",
    "simulate": "sim", "tasks": "tasks", "eval": "eval", "optimize": "optimize", "llm": "llm",
    "serve": "serve", "worker": "serve", "submit": "submit", "submission": "submit", "suggestion": "submit", "user": "leaderboard",
    "token": "leaderboard", "leaderboard": "leaderboard",
}


def build_app(groups: tuple[str, ...] = GROUPS) -> typer.Typer:
    """The typer app with the commands of `groups` registered."""
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

    for group in groups:
        importlib.import_module(f"swizzlelab.cli.{group}").register(app)
    return app


def groups_for(argv: list[str]) -> tuple[str, ...]:
    """The groups a command line needs: its command's group, or all of them (help, unknown commands)."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    return (COMMANDS[command],) if command in COMMANDS else GROUPS


def __getattr__(name: str) -> Any:
    # `from swizzlelab.cli.main import app` (tests, scripts): the app with every command.
    if name == "app":
        return build_app()
    raise AttributeError(name)


def main() -> None:
    """Entry point: run the app, turning a UserError into one red line and exit code 2."""
    try:
        build_app(groups_for(sys.argv[1:]))()
    except UserError as err:
        # The message may carry a server's words (a name, a reason): shown terminal-safe, never read as markup.
        Console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", terminal_safe(str(err))),
                                   highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        sys.exit(130)
