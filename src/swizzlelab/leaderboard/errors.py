"""Errors of the leaderboard service, each with the HTTP status the API answers it with and a one-line reason.

They are UserErrors, so the CLI's direct-database commands print them as one line and exit 2.
"""

from __future__ import annotations

from swizzlelab.errors import UserError


class ServiceError(UserError):
    """A request the service refuses; `status` is the HTTP code, str(err) the one-line reason."""

    status = 400

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BadRequest(ServiceError):
    status = 400


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class TooLarge(ServiceError):
    status = 413


class RateLimited(ServiceError):
    status = 429
