"""Bearer tokens: made from 256 random bits, stored only as sha256, checked in constant time; users and admins.

A token is shown once, when it is made; the database cannot give it back.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from swizzlelab.leaderboard.db.models import ApiToken, User
from swizzlelab.leaderboard.errors import BadRequest, Conflict, Forbidden, Unauthorized

TOKEN_PREFIX = "slb_"
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
    if not USER_NAME.match(name):
        raise BadRequest(f"user name {name!r} is not allowed: use 1-64 letters, digits, '_', '.', '-'")
    if session.scalar(select(User.id).where(User.name == name)) is not None:
        raise Conflict(f"user {name!r} already exists")
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
    digest = hash_token(token)
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
