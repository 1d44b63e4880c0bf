"""Command-line interface: one module per command group on top of every library package.

`swizzlelab.cli.main` builds the typer app; nothing below this package imports it.
"""

from swizzlelab.cli.main import app, main

__all__ = ["app", "main"]
