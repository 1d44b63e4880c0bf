"""CLI sub-commands of swizzlelab.swizzle (registered by swizzlelab.cli).

Kept separate from the library code so that importing the library never imports typer.
"""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("version")
    def version() -> None:
        """Print swizzlelab's version."""
        from swizzlelab import __version__

        typer.echo(__version__)
