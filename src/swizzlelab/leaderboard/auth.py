"""Bearer tokens: made from 256 random bits, stored only as sha256, checked in constant time; users and admins;
browser sessions opened with a token; the admin's listing and revoking of users and tokens.

A token is shown once, when it is made; the database cannot give it back.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from swizzlelab.leaderboard import queue
from swizzlelab.leaderboard.db.models import ApiToken, Submission, User, WebSession, in_id_range, utcnow
from swizzlelab.leaderboard.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized
from swizzlelab.names import BadName, check_user_name, user_name_key

TOKEN_PREFIX = "slb_"
SESSION_DAYS = 14


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    # Tokens carry 256 random bits, so a plain sha256 cannot be brute-forced; no salt or slow hash is needed.
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who made a request: a user (possibly an admin) or the deployment's admin token (user is None)."""

    user_id: int | None
    name: str
    is_admin: bool


def create_user(session: Session, name: str, is_admin: bool = False) -> tuple[User, str]:
    """A new user and its first token (returned in clear, once)."""
    try:
        check_user_name(name)
    except BadName as err:
        raise BadRequest(str(err)) from None
    taken = session.scalar(select(User.name).where(User.name_key == user_name_key(name)))
    if taken is not None:
        raise Conflict(f"user {name!r} already exists" if taken == name else
                       f"user name {name!r} is taken: {taken!r} differs only in case")
    user = User(name=name, is_admin=is_admin)
    session.add(user)
    token = new_token()
    try:
        with session.begin_nested():
            session.flush()
            session.add(ApiToken(user=user, token_sha256=hash_token(token), prefix=token[:10]))
            session.flush()
    except IntegrityError:
        raise Conflict(f"user {name!r} already exists") from None
    return user, token


def authenticate(session: Session, token: str | None, admin_token: str | None) -> Principal:
    """The principal of a bearer token; Unauthorized for a missing, unknown or revoked one, Forbidden if banned."""
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer TOKEN' (swizzlelab user add NAME makes one)")
    return authenticate_digest(session, hash_token(token), admin_token)


def authenticate_digest(session: Session, digest: str, admin_token: str | None) -> Principal:
    """authenticate() for a token known by its sha256 (a web session keeps only that)."""
    if admin_token is not None and hmac.compare_digest(digest, hash_token(admin_token)):
        return Principal(user_id=None, name="admin", is_admin=True)
    row = session.execute(
        select(ApiToken, User).join(User, ApiToken.user_id == User.id).where(ApiToken.token_sha256 == digest)
    ).first()
    # The lookup is by hash; the compare below keeps the final check constant-time as well.
    if row is None or not hmac.compare_digest(row[0].token_sha256, digest) or row[0].revoked:
        raise Unauthorized("invalid or revoked token")
    user = row[1]
    if user.banned:
        raise Forbidden(f"user {user.name!r} is banned")
    return Principal(user_id=user.id, name=user.name, is_admin=user.is_admin)


# ---------------------------------------------------------------- browser sessions


def start_web_session(session: Session, token: str, admin_token: str | None) -> tuple[str, Principal]:
    """(cookie value, principal) of a new browser session opened with `token`; the cookie's 256 random bits are
    kept only as sha256, like tokens. Expired sessions are swept here."""
    who = authenticate(session, token, admin_token)
    now = utcnow()
    session.execute(delete(WebSession).where(WebSession.expires_at < now))
    cookie = secrets.token_urlsafe(32)
    session.add(WebSession(secret_sha256=hash_token(cookie), token_sha256=hash_token(token), created_at=now,
                           expires_at=now + dt.timedelta(days=SESSION_DAYS)))
    session.flush()
    return cookie, who


def web_session_principal(session: Session, cookie: str | None, admin_token: str | None) -> Principal | None:
    """Who a session cookie belongs to; None for no cookie, an unknown or expired one, or one whose token was
    revoked (or whose user was banned) since."""
    if not cookie:
        return None
    row = session.scalar(select(WebSession).where(WebSession.secret_sha256 == hash_token(cookie)))
    if row is None or row.expires_at < utcnow():
        return None
    try:
        return authenticate_digest(session, row.token_sha256, admin_token)
    except (Unauthorized, Forbidden):
        return None


def end_web_session(session: Session, cookie: str | None) -> None:
    if cookie:
        session.execute(delete(WebSession).where(WebSession.secret_sha256 == hash_token(cookie)))


# ---------------------------------------------------------------- administration


def find_user(session: Session, name: str) -> User:
    """The user of that name (in any case where no name matches exactly); NotFound otherwise."""
    user = session.scalar(select(User).where(User.name == name)) or \
        session.scalar(select(User).where(User.name_key == user_name_key(name)))
    if user is None:
        raise NotFound(f"user {name!r} not found")
    return user


def user_views(session: Session) -> list[dict[str, Any]]:
    """Every user with its live-token and submission counts, oldest first."""
    live = (select(ApiToken.user_id, func.count(ApiToken.id).label("n")).where(ApiToken.revoked.is_(False))
            .group_by(ApiToken.user_id).subquery())
    subs = (select(Submission.user_id, func.count(Submission.id).label("n")).group_by(Submission.user_id)
            .subquery())
    rows = session.execute(
        select(User, func.coalesce(live.c.n, 0), func.coalesce(subs.c.n, 0))
        .outerjoin(live, live.c.user_id == User.id).outerjoin(subs, subs.c.user_id == User.id).order_by(User.id)
    ).all()
    return [{"id": u.id, "name": u.name, "admin": u.is_admin, "banned": u.banned,
             "created_at": u.created_at.isoformat(), "live_tokens": int(n_tokens), "submissions": int(n_subs)}
            for u, n_tokens, n_subs in rows]


def revoke_user(session: Session, name: str) -> dict[str, Any]:
    """Ban a user and revoke every token of theirs (their sessions end with them); their runs leave the ranking,
    and their jobs no worker has claimed yet are cancelled (a running one finishes). Rows stay: submissions and
    runs are the record."""
    user = find_user(session, name)
    user.banned = True
    revoked = session.execute(update(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked.is_(False))
                              .values(revoked=True)).rowcount
    cancelled = queue.cancel_jobs_of(session, user.id, f"cancelled: user {user.name} was banned")
    return {"name": user.name, "banned": True, "tokens_revoked": int(revoked or 0), "jobs_cancelled": cancelled}


def new_token_for(session: Session, name: str) -> tuple[User, str]:
    """A further token for an existing, not banned user (returned in clear, once)."""
    user = find_user(session, name)
    if user.banned:
        raise Conflict(f"user {name!r} is banned; a banned user gets no new token")
    token = new_token()
    session.add(ApiToken(user_id=user.id, token_sha256=hash_token(token), prefix=token[:10]))
    session.flush()
    return user, token


def token_views(session: Session, user_name: str | None = None) -> list[dict[str, Any]]:
    """Tokens (never their value: only the first characters), oldest first; one user's when named."""
    query = select(ApiToken, User.name).join(User, ApiToken.user_id == User.id).order_by(ApiToken.id)
    if user_name is not None:
        query = query.where(ApiToken.user_id == find_user(session, user_name).id)
    return [{"id": t.id, "user": name, "prefix": t.prefix, "created_at": t.created_at.isoformat(),
             "revoked": t.revoked} for t, name in session.execute(query).all()]


def revoke_token(session: Session, token_id: int) -> dict[str, Any]:
    token = session.get(ApiToken, token_id) if in_id_range(token_id, session) else None
    if token is None:
        raise NotFound(f"token {token_id} not found")
    token.revoked = True
    return {"id": token.id, "user": token.user.name, "prefix": token.prefix, "revoked": True}
