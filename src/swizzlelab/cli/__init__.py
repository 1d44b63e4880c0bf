"""Command-line interface: one module per command group on top of every library package.

`swizzlelab.cli.main` builds the typer app; nothing below this package imports it.
"""

from typing import Any

from swizzlelab.cli.main import main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    # The full app is built on demand: `main()` builds only the group a command needs.
    if name == "app":
        from swizzlelab.cli.main import build_app

        return build_app()
    raise AttributeError(name)
