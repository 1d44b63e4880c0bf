"""CLI client of the leaderboard: `swizzlelab submit TASK FILE --mode ... [--gpu H100] [--server URL] [--token]`.

Waits with a progress display, prints the leaderboard-shaped report; exit 0 pass, 1 fail, 2 usage errors.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from swizzlelab.errors import UserError
from swizzlelab.leaderboard.client import DEFAULT_SERVER, Client
from swizzlelab.leaderboard.settings import MODES


def server_option() -> Any:
    return typer.Option(None, "--server", help=f"leaderboard URL (default $SWIZZLELAB_SERVER or {DEFAULT_SERVER})")


def resolve_server(server: Optional[str]) -> str:
    return server or os.environ.get("SWIZZLELAB_SERVER") or DEFAULT_SERVER


def _progress_text(view: dict[str, Any], started: float) -> str:
    jobs = view.get("jobs", [])
    done = sum(1 for j in jobs if j["status"] in ("done", "error"))
    return (f"submission {view['id']} · {view['leaderboard']} · {view['mode']}: {view['status']} "
            f"({done}/{len(jobs)} runs finished, {time.monotonic() - started:.0f} s)")


def verdict_line(view: dict[str, Any]) -> tuple[str, bool]:
    """(one line, passed) for a finished submission."""
    if view["status"] == "error":
        return f"submission {view['id']}: not evaluated (service error: {view['error']})", False
    score = f", score {view['score_ms']:.4g} ms (measured, {view['runs'][0]['gpu']})" if view.get("score_ms") else ""
    if view["passed"] and view["flagged"]:
        return f"submission {view['id']}: passed but FLAGGED, not ranked: {view['flag_reason']}{score}", False
    if view["passed"]:
        return f"submission {view['id']}: passed{score}", True
    reason = next((r["reason"] for r in view["runs"] if not r["secret"] and r["reason"]), "")
    return f"submission {view['id']}: FAILED{': ' + reason if reason else ''}", False


def register(app: typer.Typer) -> None:
    """Add `submit` to the main app."""

    @app.command("submit")
    def submit_command(
        task: str = typer.Argument(..., help="task name (see `swizzlelab tasks`)"),
        file: Path = typer.Argument(..., help="a .py file defining custom_kernel(data)"),
        mode: str = typer.Option("test", "--mode", help=" | ".join(MODES)),
        gpu: str = typer.Option("H100", "--gpu", help="the leaderboard's GPU type"),
        server: Optional[str] = server_option(),
        token: Optional[str] = typer.Option(None, "--token", help="bearer token (default $SWIZZLELAB_TOKEN)"),
        timeout: float = typer.Option(3600.0, "--timeout", help="give up waiting after this many seconds"),
    ) -> None:
        """Submit a kernel to a leaderboard, wait for its runs and print the report."""
        if mode not in MODES:
            raise UserError(f"unknown --mode {mode!r}: use one of {', '.join(MODES)}")
        token = token or os.environ.get("SWIZZLELAB_TOKEN")
        if not token:
            raise UserError("no token: pass --token or set SWIZZLELAB_TOKEN (an admin makes one with `swizzlelab user add NAME`)")
        if not file.is_file():
            raise UserError(f"submission file {file} does not exist; give a .py file defining custom_kernel(data)")
        try:
            code = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{file} is not UTF-8 text; submit a Python source file") from None
        client = Client(resolve_server(server), token)
        console = Console(stderr=True)
        started = time.monotonic()
        view = client.submit(task, gpu, mode, code, file.name)
        with console.status(_progress_text(view, started)) as status:
            view = client.wait(view["id"], lambda v: status.update(_progress_text(v, started)), timeout_s=timeout)
        for summary in view["runs"]:
            run = client.get(f"/api/runs/{summary['id']}")
            if summary["secret"]:
                typer.echo(f"## Secret run (leaderboard's secret seed): {'passed' if run['passed'] else 'FAILED'}"
                           + (f", {run['score_ms']:.4g} ms" if run.get("score_ms") else ""))
            else:
                typer.echo(run["report_text"], nl=not run["report_text"].endswith("\n"))
            for f in run.get("profile_files", []):
                typer.echo(f"profile file: {f['name']} ({f['size_bytes']} bytes): GET /api/runs/{run['id']}/files/{f['id']}")
        line, passed = verdict_line(view)
        typer.echo(line)
        if not passed:
            raise typer.Exit(code=1)
