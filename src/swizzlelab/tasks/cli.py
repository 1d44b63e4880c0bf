"""CLI sub-commands of swizzlelab.tasks (registered by swizzlelab.cli).

Kept separate from the library code so that importing the library never imports typer.
"""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app (none yet)."""
