"""The `swizzlelab` console command: a thin typer layer over the library modules.

Each module contributes its own sub-commands through a `register(app)` function in its `cli.py`.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

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


def _register_all() -> None:
    from swizzlelab.swizzle import cli as swizzle_cli
    from swizzlelab.sim import cli as sim_cli
    from swizzlelab.trace import cli as trace_cli
    from swizzlelab.tasks import cli as tasks_cli
    from swizzlelab.harness import cli as harness_cli
    from swizzlelab.optimize import cli as optimize_cli

    for module in (swizzle_cli, trace_cli, sim_cli, tasks_cli, harness_cli, optimize_cli):
        module.register(app)


_register_all()


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


if __name__ == "__main__":
    main()
