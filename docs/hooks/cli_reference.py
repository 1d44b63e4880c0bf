"""The CLI reference page (docs/cli.md), rendered from swizzlelab.cli's typer app: every command's usage, help and
options. As a mkdocs hook (mkdocs.yml) it stops the build when the committed page is not what the app renders.

    python docs/hooks/cli_reference.py        # rewrite docs/cli.md from the installed app
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import typer
from mkdocs.exceptions import PluginError

from swizzlelab.cli.main import build_app

PAGE = Path(__file__).resolve().parents[1] / "cli.md"
HEAD = """# CLI reference

Every `swizzlelab` command with its options, rendered from the typer app by `docs/hooks/cli_reference.py`
(`python docs/hooks/cli_reference.py` rewrites this page; the docs build and `tests/test_docs.py` fail when it is
stale). `swizzlelab COMMAND --help` prints the same.
"""


def cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def command_section(path: list[str], command: click.Command, ctx: click.Context) -> list[str]:
    lines = [f"## {' '.join(path)}", "", cell(command.help or ""), "", "```text", command.get_usage(ctx), "```", ""]
    records = [p.get_help_record(ctx) for p in command.params if not getattr(p, "hidden", False)]
    records = [r for r in records if r]
    if records:
        lines += ["| argument or option | what |", "| --- | --- |"]
        lines += [f"| `{cell(names)}` | {cell(text)} |" for names, text in records]
        lines.append("")
    return lines


def render() -> str:
    """The page for the app with every command group (swizzlelab.cli.main.build_app)."""
    root = typer.main.get_command(build_app())
    out = [HEAD]

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=path[-1], parent=parent)
        if path != ["swizzlelab"]:
            out.extend(command_section(path, command, ctx))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name], ctx)

    walk(root, ["swizzlelab"], None)
    return "\n".join(out).rstrip("\n") + "\n"


def on_pre_build(config: object) -> None:
    """mkdocs hook: a stale page fails the build (the page documents the commands as they are)."""
    if not PAGE.is_file() or PAGE.read_text() != render():
        raise PluginError("docs/cli.md is not what the typer app renders: python docs/hooks/cli_reference.py")


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
    sys.exit(0)
