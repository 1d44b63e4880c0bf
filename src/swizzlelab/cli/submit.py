"""CLI client of the leaderboard: `swizzlelab submit TASK FILE --mode ...` and a user's other requests,
`swizzlelab submission list | show ID | cancel ID`, `swizzlelab suggestion ID` (all through --server with the user's
token).

submit waits with a progress display (a line every few seconds when not on a terminal), prints the
leaderboard-shaped report, then the suggestion of a faster block order when one is made for the submission;
exit 0 pass, 1 fail, 2 usage errors and refusals.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from swizzlelab.cli.common import console, echo, plain
from swizzlelab.errors import UserError
from swizzlelab.io import atomic_write_text
from swizzlelab.leaderboard.client import DEFAULT_SERVER, FINISHED, Client
from swizzlelab.leaderboard.settings import MODES

PIPE_PROGRESS_S = 5.0  # a progress line this often when stderr is not a terminal (CI logs, pipes)
SUGGESTION_WAIT_S = 1800.0  # submit waits this long for a suggestion by default
submission_app = typer.Typer(help="Your submissions: list them, show one (report and code), cancel a queued one.",
                             no_args_is_help=True)


def server_option() -> Any:
    return typer.Option(None, "--server", help=f"leaderboard URL (default $SWIZZLELAB_SERVER or {DEFAULT_SERVER})")


def token_option() -> Any:
    return typer.Option(None, "--token", help="bearer token (default $SWIZZLELAB_TOKEN)")


def resolve_server(server: Optional[str]) -> str:
    return server or os.environ.get("SWIZZLELAB_SERVER") or DEFAULT_SERVER


def user_client(server: Optional[str], token: Optional[str]) -> Client:
    token = token or os.environ.get("SWIZZLELAB_TOKEN")
    if not token:
        raise UserError("no token: pass --token or set SWIZZLELAB_TOKEN (an admin makes one with `swizzlelab user add NAME`)")
    return Client(resolve_server(server), token)


def _progress_text(view: dict[str, Any], started: float) -> str:
    jobs = view.get("jobs", [])
    done = sum(1 for j in jobs if j["status"] not in ("queued", "running"))
    waiting = f" · {view['waiting']}" if view.get("waiting") else ""
    return (f"submission {view['id']} · {view['leaderboard']} · {view['mode']}: {view['status']} "
            f"({done}/{len(jobs)} runs finished, {time.monotonic() - started:.0f} s){waiting}")


def progress_printer(err: Console, started: float, every_s: float = PIPE_PROGRESS_S
                     ) -> Callable[[dict[str, Any]], None]:
    """For a stderr that is no terminal (no live status line there): one line at once, then one whenever the
    status or the waiting reason changes, and one every `every_s` seconds while nothing does."""
    last: dict[str, Any] = {"at": -1e9, "key": None}

    def show(view: dict[str, Any]) -> None:
        key = (view["status"], view.get("waiting"), tuple(j["status"] for j in view.get("jobs", [])))
        now = time.monotonic()
        if key != last["key"] or now - last["at"] >= every_s:
            err.print(plain(_progress_text(view, started)), highlight=False)
            last["at"], last["key"] = now, key

    return show


def verdict_line(view: dict[str, Any]) -> tuple[str, bool]:
    """(one line, passed) for a finished submission."""
    if view["status"] == "error":
        return f"submission {view['id']}: not evaluated (service error: {view['error']})", False
    if view["status"] == "cancelled":
        return f"submission {view['id']}: cancelled", False
    score = f", score {view['score_ms']:.4g} ms (measured, {view['runs'][0]['gpu']})" if view.get("score_ms") else ""
    if view["passed"] and view["flagged"]:
        return f"submission {view['id']}: passed but FLAGGED, not ranked: {view['flag_reason']}{score}", False
    if view["passed"]:
        return f"submission {view['id']}: passed{score}", True
    reason = next((r["reason"] for r in view["runs"] if not r["secret"] and r["reason"]), "")
    return f"submission {view['id']}: FAILED{': ' + reason if reason else ''}", False


def print_runs(client: Client, view: dict[str, Any]) -> None:
    """Each run's leaderboard-shaped report (a secret run: its verdict only) and its profile files."""
    for summary in view["runs"]:
        run = client.get(f"/api/runs/{summary['id']}")
        if summary["secret"]:
            echo(f"## Secret run (leaderboard's secret seed): {'passed' if run['passed'] else 'FAILED'}"
                       + (f", {run['score_ms']:.4g} ms" if run.get("score_ms") else ""))
        else:
            echo(run["report_text"], nl=not run["report_text"].endswith("\n"))
        for f in run.get("profile_files", []):
            echo(f"profile file: {f['name']} ({f['size_bytes']} bytes): GET /api/runs/{run['id']}/files/{f['id']}")


def _figure(f: dict[str, Any] | None) -> str:
    return f"{f['speedup']:.3f}x [{f['low']:.3f}, {f['high']:.3f}]" if f else "-"


def suggestion_lines(view: dict[str, Any]) -> list[str]:
    """A suggestion (GET /api/submissions/ID/suggestion) as text: the order, its proof, predicted and measured
    speedups with their intervals, each labelled, and where the patched kernel is."""
    sid = view["submission_id"]
    lines = [f"## Suggestion for submission {sid}: which block order would make it faster"]
    if view["status"] in ("queued", "running"):
        return lines + [f"{view['status']}: made after every submission's job; `swizzlelab suggestion {sid}` shows it"]
    if view["status"] == "failed":
        return lines + [view["note"] or "no suggestion could be made"]
    if view["outcome"] == "none":
        lines.append("no order beats yours (measured)" if view["measured"] else "no order is predicted to beat yours")
    lines.append(view["headline"])
    order = view.get("order")
    if order:
        measured = order.get("measured")
        lines += [f"order: {order['spec']}",
                  f"proof: {order['proof']}",
                  f"predicted: {_figure(order['predicted'])} (time model {view['model']})",
                  "measured: " + (f"{_figure(measured)} ({measured['gpu']}, 95% interval)" if measured
                                  else "not measured (no GPU of the leaderboard's type made this suggestion)"),
                  "formula:", *[f"    {line}" for line in order["formula"].splitlines()]]
        for case in (measured or {}).get("cases", []):
            lines.append(f"  {case['case']}: {_figure(case)} measured, {case['own_ms']:.4g} ms -> "
                         f"{case['order_ms']:.4g} ms")
    if view.get("has_patched_code"):
        lines.append(f"patched kernel: swizzlelab suggestion {sid} --out FILE "
                     f"(GET /api/submissions/{sid}/suggestion/patched)")
    if view.get("note"):
        lines.append(f"notes: {view['note']}")
    if view.get("seconds") is not None:
        lines.append(f"made {view['seconds']:.0f} s after the result")
    return lines


def wait_for_suggestion(client: Client, submission_id: int, timeout_s: float, err: Console) -> dict[str, Any] | None:
    """Poll the submission's suggestion until it is finished (None after timeout_s), a line every few seconds."""
    start = time.monotonic()
    last = -1e9
    while True:
        view = client.get(f"/api/submissions/{submission_id}/suggestion")
        if view["status"] not in ("queued", "running"):
            return view
        now = time.monotonic()
        if now - start > timeout_s:
            return None
        if now - last >= PIPE_PROGRESS_S:
            err.print(plain(f"suggestion for submission {submission_id}: {view['status']} ({now - start:.0f} s)"),
                      highlight=False)
            last = now
        time.sleep(1.0)


@submission_app.command("list")
def submission_list(
    limit: int = typer.Option(20, "--limit", help="newest this many"),
    status: Optional[str] = typer.Option(None, "--status", help="queued | running | done | error | cancelled"),
    server: Optional[str] = server_option(),
    token: Optional[str] = token_option(),
) -> None:
    """Your submissions, newest first."""
    query = f"/api/submissions?limit={limit}" + (f"&status={status}" if status else "")
    rows = user_client(server, token).get(query)
    if not rows:
        echo("no submissions")
        return
    table = Table(title="your submissions (scores measured on the leaderboard's GPU)")
    for name in ("id", "leaderboard", "mode", "status", "verdict", "score (ms)", "file", "submitted (UTC)"):
        table.add_column(name, justify="right" if name in ("id", "score (ms)") else "left")
    for s in rows:
        verdict = "" if s["passed"] is None else ("passed" if s["passed"] else "failed") + (" flagged" if s["flagged"] else "")
        cells = (str(s["id"]), s["leaderboard"], s["mode"], s["status"] + (f" ({s['waiting']})" if s.get("waiting") else ""),
                 verdict, f"{s['score_ms']:.4f}" if s["score_ms"] is not None else "-", s["filename"],
                 s["created_at"][:19].replace("T", " "))
        table.add_row(*map(plain, cells))
    console().print(table)


@submission_app.command("show")
def submission_show(
    submission_id: int = typer.Argument(..., help="the submission's id (submit and `submission list` print it)"),
    code: bool = typer.Option(True, "--code/--no-code", help="print the submitted code after the report"),
    server: Optional[str] = server_option(),
    token: Optional[str] = token_option(),
) -> None:
    """One of your submissions: status, each run's report, and its code. Exit 1 when it finished without passing."""
    client = user_client(server, token)
    view = client.get(f"/api/submissions/{submission_id}")
    echo(f"submission {view['id']} · {view['leaderboard']} · {view['mode']} · {view['filename']} · "
               f"submitted {view['created_at'][:19].replace('T', ' ')} UTC · {view['status']}"
               + (f" · {view['waiting']}" if view.get("waiting") else ""))
    print_runs(client, view)
    if code:
        source = client.get(f"/api/submissions/{submission_id}/code")
        echo(f"## Code ({source['filename']}, sha256 {source['sha256'][:12]})")
        echo(source["code"], nl=not source["code"].endswith("\n"))
    if view["status"] in FINISHED:
        line, passed = verdict_line(view)
        echo(line)
        if not passed:
            raise typer.Exit(code=1)


@submission_app.command("cancel")
def submission_cancel(
    submission_id: int = typer.Argument(...),
    server: Optional[str] = server_option(),
    token: Optional[str] = token_option(),
) -> None:
    """Cancel your submission while no worker has started it."""
    view = user_client(server, token).post(f"/api/submissions/{submission_id}/cancel", {})
    echo(f"submission {view['id']}: {view['status']}")


def register(app: typer.Typer) -> None:
    """Add `submit` and the `submission` group to the main app."""

    @app.command("submit")
    def submit_command(
        task: str = typer.Argument(..., help="task name (see `swizzlelab tasks`)"),
        file: Path = typer.Argument(..., help="a .py file defining custom_kernel(data)"),
        mode: str = typer.Option("test", "--mode", help=" | ".join(MODES)),
        gpu: str = typer.Option("H100", "--gpu", help="the leaderboard's GPU type"),
        server: Optional[str] = server_option(),
        token: Optional[str] = token_option(),
        timeout: float = typer.Option(3600.0, "--timeout", help="give up waiting after this many seconds"),
        suggestion_wait: float = typer.Option(SUGGESTION_WAIT_S, "--suggestion-wait", help="then wait this long for "
                                              "the suggestion of a faster block order, when one is queued (0: not)"),
    ) -> None:
        """Submit a kernel to a leaderboard, wait for its runs and print the report."""
        if mode not in MODES:
            raise UserError(f"unknown --mode {mode!r}: use one of {', '.join(MODES)}")
        if file.is_dir():
            raise UserError(f"{file} is a folder; give a .py file defining custom_kernel(data)")
        if not file.is_file():
            raise UserError(f"submission file {file} does not exist; give a .py file defining custom_kernel(data)")
        try:
            code = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{file} is not UTF-8 text; submit a Python source file") from None
        except OSError as err:
            raise UserError(f"cannot read {file}: {err.strerror or err}") from None
        client = user_client(server, token)
        err = console(stderr=True)
        started = time.monotonic()
        view = client.submit(task, gpu, mode, code, file.name)
        if sys.stderr.isatty():
            with err.status(plain(_progress_text(view, started))) as status:
                view = client.wait(view["id"], lambda v: status.update(plain(_progress_text(v, started))),
                                   timeout_s=timeout)
        else:
            view = client.wait(view["id"], progress_printer(err, started), timeout_s=timeout)
        print_runs(client, view)
        line, passed = verdict_line(view)
        echo(line)
        if view.get("suggestion") and suggestion_wait > 0:
            found = wait_for_suggestion(client, view["id"], suggestion_wait, err)
            echo("\n".join(suggestion_lines(found)) if found else
                       f"the suggestion is not made yet; `swizzlelab suggestion {view['id']}` shows it later")
        if not passed:
            raise typer.Exit(code=1)

    @app.command("suggestion")
    def suggestion_command(
        submission_id: int = typer.Argument(..., help="your submission's id"),
        wait: float = typer.Option(0.0, "--wait", help="wait this many seconds for a queued or running one"),
        out: Optional[Path] = typer.Option(None, "--out", help="write the patched kernel (your file with only its "
                                           "site replaced by the suggested order) here"),
        server: Optional[str] = server_option(),
        token: Optional[str] = token_option(),
    ) -> None:
        """Which block order would make your submission's kernel faster: predicted and measured speedups."""
        client = user_client(server, token)
        view = client.get(f"/api/submissions/{submission_id}/suggestion")
        if wait > 0 and view["status"] in ("queued", "running"):
            view = wait_for_suggestion(client, submission_id, wait, console(stderr=True)) or view
        echo("\n".join(suggestion_lines(view)))
        if out is not None:
            if not view.get("has_patched_code"):
                raise UserError(f"submission {submission_id}'s suggestion has no patched kernel to write")
            atomic_write_text(out, client.get(f"/api/submissions/{submission_id}/suggestion/patched").decode("utf-8"))
            typer.echo(f"wrote {out}")

    app.add_typer(submission_app, name="submission")
