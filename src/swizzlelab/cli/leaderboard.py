"""CLI of leaderboard administration: `swizzlelab user add|list|revoke`, `swizzlelab token add|list|revoke`,
`swizzlelab leaderboard create|set|show|list`.

Each works on the database directly (--db) or through a running server (--server, admin token for writes).
"""

from __future__ import annotations

import datetime as dt
import os
from urllib.parse import quote
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from swizzlelab.errors import UserError
from swizzlelab.leaderboard.client import Client
from swizzlelab.leaderboard.settings import settings_from_env
from swizzlelab.cli.common import console, echo, plain
from swizzlelab.cli.submit import resolve_server
from swizzlelab.leaderboard.settings import check_db_url

user_app = typer.Typer(help="Leaderboard users: add, list, revoke (ban, with all their tokens).", no_args_is_help=True)
token_app = typer.Typer(help="API tokens: add one for a user, list them, revoke one.", no_args_is_help=True)
board_app = typer.Typer(help="Leaderboards: create one, change one, list them, show a ranking.", no_args_is_help=True)


def _db_option() -> Any:
    return typer.Option(None, "--db", help="work on this database directly (a SQLite path or postgresql+psycopg://...)")


def _server_option() -> Any:
    return typer.Option(None, "--server", help="work through this server instead (default $SWIZZLELAB_SERVER)")


def _admin_token_option() -> Any:
    return typer.Option(None, "--token", help="admin token for --server (default $SWIZZLELAB_ADMIN_TOKEN)")


def _open(db: Optional[str]):  # type: ignore[no-untyped-def]
    from swizzlelab.leaderboard.db import open_database

    if db is not None:
        check_db_url(db)
    return open_database(db or settings_from_env().db_url)


def _admin_do(db: Optional[str], server: Optional[str], token: Optional[str], method: str, path: str,
              direct: Callable[[Any], Any], write: bool = True) -> Any:
    """One admin action: through the server's API when --server is given, else on the database directly
    (`direct(session)` inside one transaction); both give the same JSON-shaped result."""
    if server:
        client = _admin_client(server, token)
        return client.get(path) if method == "GET" else client.post(path, {})
    database = _open(db)
    try:
        with (database.write() if write else database.read()) as session:
            return direct(session)
    finally:
        database.dispose()


def _admin_client(server: Optional[str], token: Optional[str]) -> Client:
    token = token or os.environ.get("SWIZZLELAB_ADMIN_TOKEN")
    if not token:
        raise UserError("--server needs an admin token: pass --token or set SWIZZLELAB_ADMIN_TOKEN")
    return Client(resolve_server(server), token)


def _parse_deadline(text: Optional[str]) -> Optional[dt.datetime]:
    if text is None:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--deadline {text!r} is not an ISO date, e.g. 2026-12-31 or 2026-12-31T18:00+00:00") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _ranking_table(board: dict[str, Any], rows: list[dict[str, Any]]) -> Table:
    deadline = f" · deadline {board['deadline']}" if board.get("deadline") else ""
    table = Table(title=plain(f"{board['task']} · {board['gpu_type']}{deadline} · score = {board['ranking_rule']} "
                              f"of ranked benchmark means (measured)"))
    for name in ("rank", "user", "time (ms)", "submitted (UTC)", "file", "measured on", "submission"):
        table.add_column(name, justify="right" if name in ("rank", "time (ms)", "submission") else "left")
    for row in rows:
        table.add_row(*map(plain, (str(row["rank"]), row["user"], f"{row['score_ms']:.4f}",
                                   row["submitted_at"][:19].replace("T", " "), row["filename"], row["gpu"],
                                   str(row["submission_id"]))))
    return table


@user_app.command("add")
def user_add(
    name: str = typer.Argument(...),
    admin: bool = typer.Option(False, "--admin", help="the user may call admin routes"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Create a user; prints its new token as the last word (shown once: the database keeps only its hash)."""
    if server:
        made = _admin_client(server, token).post("/api/users", {"name": name, "admin": admin})
        echo(f"created user {made['name']}{' (admin)' if made['admin'] else ''}; token: {made['token']}")
        return
    from swizzlelab.leaderboard.auth import create_user

    database = _open(db)
    try:
        with database.write() as session:
            user, new = create_user(session, name, admin)
            label = f"{user.name}{' (admin)' if user.is_admin else ''}"
    finally:
        database.dispose()
    echo(f"created user {label}; token: {new}")


@user_app.command("list")
def user_list(
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Every user: admin or not, banned or not, live tokens, submissions."""
    from swizzlelab.leaderboard import auth

    rows = _admin_do(db, server, token, "GET", "/api/users", auth.user_views, write=False)
    table = Table(title=f"{len(rows)} users")
    for name in ("id", "name", "admin", "banned", "live tokens", "submissions", "created (UTC)"):
        table.add_column(name, justify="right" if name in ("id", "live tokens", "submissions") else "left")
    for u in rows:
        table.add_row(*map(plain, (str(u["id"]), u["name"], "yes" if u["admin"] else "", "BANNED" if u["banned"] else "",
                                   str(u["live_tokens"]), str(u["submissions"]), u["created_at"][:19].replace("T", " "))))
    console().print(table)


@user_app.command("revoke")
def user_revoke(
    name: str = typer.Argument(...),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Ban a user and revoke all their tokens (their browser sessions end too; their runs leave the ranking)."""
    from swizzlelab.leaderboard import auth

    done = _admin_do(db, server, token, "POST", f"/api/users/{quote(name, safe='')}/revoke",
                     lambda session: auth.revoke_user(session, name))
    echo(f"user {done['name']} banned; {done['tokens_revoked']} token(s) revoked, {done.get('jobs_cancelled', 0)} "
         "queued job(s) cancelled")


@token_app.command("add")
def token_add(
    name: str = typer.Argument(..., help="the user"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """A further token for a user; printed as the last word, once."""
    from swizzlelab.leaderboard import auth

    def direct(session: Any) -> dict[str, Any]:
        user, new = auth.new_token_for(session, name)
        return {"name": user.name, "token": new}

    made = _admin_do(db, server, token, "POST", f"/api/users/{quote(name, safe='')}/tokens", direct)
    echo(f"new token for {made['name']}: {made['token']}")


@token_app.command("list")
def token_list(
    user: Optional[str] = typer.Option(None, "--user", help="only this user's"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Tokens by id, with their first characters (the database has no more of them)."""
    from swizzlelab.leaderboard import auth

    path = "/api/tokens" + (f"?user={quote(user, safe='')}" if user else "")
    rows = _admin_do(db, server, token, "GET", path, lambda session: auth.token_views(session, user), write=False)
    table = Table(title=f"{len(rows)} tokens")
    for name in ("id", "user", "starts with", "created (UTC)", "revoked"):
        table.add_column(name, justify="right" if name == "id" else "left")
    for t in rows:
        table.add_row(*map(plain, (str(t["id"]), t["user"], t["prefix"] + "...", t["created_at"][:19].replace("T", " "),
                                   "REVOKED" if t["revoked"] else "")))
    console().print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: int = typer.Argument(..., help="the token's id (see `token list`)"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Revoke one token; requests and browser sessions made with it stop working at once."""
    from swizzlelab.leaderboard import auth

    done = _admin_do(db, server, token, "POST", f"/api/tokens/{token_id}/revoke",
                     lambda session: auth.revoke_token(session, token_id))
    echo(f"token {done['id']} of {done['user']} ({done['prefix']}...) revoked")


@board_app.command("create")
def leaderboard_create(
    task: str = typer.Argument(...),
    gpu: str = typer.Option("H100", "--gpu"),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="ISO date/time (UTC unless a zone is given)"),
    hidden: bool = typer.Option(False, "--hidden", help="not listed publicly"),
    publish_code: bool = typer.Option(False, "--publish-code", help="everyone may read the code once the deadline "
                                      "has passed (before it, and without this, only its owner and admins)"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Create a leaderboard for TASK on one GPU type (with a fresh secret seed)."""
    when = _parse_deadline(deadline)
    if server:
        view = _admin_client(server, token).post("/api/leaderboards", {
            "task": task, "gpu_type": gpu, "deadline": when.isoformat() if when else None, "visible": not hidden,
            "publish_code": publish_code})
    else:
        from swizzlelab.leaderboard import service

        database = _open(db)
        try:
            with database.write() as session:
                view = service.leaderboard_view(service.create_leaderboard(session, task, gpu, when, not hidden,
                                                                           publish_code))
        finally:
            database.dispose()
    echo(f"created leaderboard {view['name']}" + (f", deadline {view['deadline']}" if view["deadline"] else "")
               + (", code published after the deadline" if view["publish_code"] else ""))


@board_app.command("set")
def leaderboard_set(
    task: str = typer.Argument(...),
    gpu: str = typer.Option("H100", "--gpu"),
    deadline: Optional[str] = typer.Option(None, "--deadline", help="ISO date/time, or 'none' to open it forever"),
    visible: Optional[bool] = typer.Option(None, "--visible/--hidden"),
    publish_code: Optional[bool] = typer.Option(None, "--publish-code/--private-code"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
    token: Optional[str] = _admin_token_option(),
) -> None:
    """Change a leaderboard's deadline, visibility or code publishing."""
    clear = deadline is not None and deadline.strip().lower() == "none"
    when = None if clear else _parse_deadline(deadline)
    if server:
        body = {"deadline": when.isoformat() if when else None, "clear_deadline": clear, "visible": visible,
                "publish_code": publish_code}
        view = _admin_client(server, token).patch(f"/api/leaderboards/{quote(task, safe='')}/{quote(gpu, safe='')}",
                                                  body)
    else:
        from swizzlelab.leaderboard import service

        database = _open(db)
        try:
            with database.write() as session:
                board = service.find_leaderboard(session, task, gpu)
                change: Any = None if clear else when if when is not None else "keep"
                view = service.leaderboard_view(service.update_leaderboard(session, board, change, visible,
                                                                           publish_code))
        finally:
            database.dispose()
    echo(f"{view['name']}: deadline {view['deadline'] or 'none'}, {'visible' if view['visible'] else 'hidden'}, "
               f"code {'published after the deadline' if view['publish_code'] else 'private to owners and admins'}")


@board_app.command("show")
def leaderboard_show(
    task: str = typer.Argument(...),
    gpu: str = typer.Option("H100", "--gpu"),
    db: Optional[str] = _db_option(),
    server: Optional[str] = _server_option(),
) -> None:
    """The ranked table: each user's best passed ranked run, by time."""
    if db is None and (server or os.environ.get("SWIZZLELAB_SERVER")):
        data = Client(resolve_server(server)).get(f"/api/leaderboards/{task}/{gpu}/ranking")
        board, rows = data["leaderboard"], data["ranking"]
    else:
        from swizzlelab.leaderboard import service
        from swizzlelab.leaderboard.ranking import ranking

        database = _open(db)
        try:
            with database.read() as session:
                found = service.find_leaderboard(session, task, gpu)
                board, rows = service.leaderboard_view(found), [r.to_dict() for r in ranking(session, found)]
        finally:
            database.dispose()
    console = Console()
    if not rows:
        console.print(plain(f"{board['name']}: no ranked runs yet"), highlight=False)
        return
    console.print(_ranking_table(board, rows))


@board_app.command("list")
def leaderboard_list(db: Optional[str] = _db_option(), server: Optional[str] = _server_option()) -> None:
    """Every visible leaderboard."""
    if db is None and (server or os.environ.get("SWIZZLELAB_SERVER")):
        boards = Client(resolve_server(server)).get("/api/leaderboards")
    else:
        from sqlalchemy import select

        from swizzlelab.leaderboard import service
        from swizzlelab.leaderboard.db import Leaderboard

        database = _open(db)
        try:
            with database.read() as session:
                boards = [service.leaderboard_view(b) for b in
                          session.scalars(select(Leaderboard).order_by(Leaderboard.name)).all()]
        finally:
            database.dispose()
    for board in boards:
        echo(f"{board['name']}\t{'open' if board['open'] else 'closed'}"
                   + (f"\tdeadline {board['deadline']}" if board["deadline"] else ""))


def register(app: typer.Typer) -> None:
    """Add the `user`, `token` and `leaderboard` groups to the main app."""
    app.add_typer(user_app, name="user")
    app.add_typer(token_app, name="token")
    app.add_typer(board_app, name="leaderboard")
