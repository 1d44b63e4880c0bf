"""The REST API (FastAPI, documented offline at /docs and /redoc, /openapi.json): users and tokens, tasks,
leaderboards, submissions (and cancelling them), runs, rankings, workers; bearer-token auth, request limits per user
(per client address without a valid token), submission rate limits, streaming body limits, one-line 4xx errors.

`create_app(settings)` opens (and upgrades, and on a fresh database seeds) the database and mounts the web pages
of swizzlelab.leaderboard.web when that package is present.
"""


import collections
import datetime as dt
import importlib
import importlib.util
import logging
import math
import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field
from sqlalchemy import select
from starlette.exceptions import HTTPException as StarletteHTTPException

from swizzlelab.errors import UserError
from swizzlelab.leaderboard import auth, presence, service, suggestions
from swizzlelab.leaderboard.auth import Principal, authenticate, create_user
from swizzlelab.leaderboard.bodylimit import BodyLimit
from swizzlelab.leaderboard.headers import SecurityHeaders
from swizzlelab.leaderboard.db import Database, Leaderboard, ProfileFile, Submission, open_database
from swizzlelab.leaderboard.db.models import in_id_range
from swizzlelab.leaderboard.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    RateLimited,
    ServiceError,
    TooLarge,
    Unauthorized,
)
from swizzlelab.leaderboard.ranking import ranking
from swizzlelab.leaderboard.settings import MODES, Settings
from swizzlelab.names import download_name

# No `from __future__ import annotations` here: FastAPI reads the Depends(...) closures in route signatures.
LOG = logging.getLogger("swizzlelab.leaderboard")
WEB_MODULE = "swizzlelab.leaderboard.web"
BODY_OVERHEAD_BYTES = 16 * 1024  # the other fields of a submission request
# JSON may escape one byte of code as six (\u0000); such code is refused after parsing, with its real size.
JSON_ESCAPE_FACTOR = 6
SMALL_BODY_BYTES = 16 * 1024  # every other request body (admin JSON, login forms) is tiny
SUBMISSION_PATHS = ("/api/submissions", "/submit")  # routes whose body carries code
DOCS_STATIC = "/docs-static"


# ---------------------------------------------------------------- request bodies


class UserIn(BaseModel):
    name: str = Field(description="1-64 letters, digits, '_', '.', '-'")
    admin: bool = False


class LeaderboardIn(BaseModel):
    task: str
    gpu_type: str = "H100"
    deadline: dt.datetime | None = Field(None, description="ISO 8601 with a time zone; none = open forever")
    visible: bool = True
    publish_code: bool = Field(False, description="everyone may read submissions' code once the deadline passed")


class LeaderboardPatch(BaseModel):
    deadline: dt.datetime | None = Field(None, description="ISO 8601 with a time zone; give null with "
                                         "clear_deadline to open it forever")
    clear_deadline: bool = False
    visible: bool | None = None
    publish_code: bool | None = None


class RateLimitIn(BaseModel):
    task: str | None = Field(None, description="with gpu_type: one leaderboard; none: all leaderboards")
    gpu_type: str | None = None
    mode: str | None = Field(None, description="test | benchmark | ranked | profile; none: every mode")
    max_submissions: int
    window_s: int = 3600


class SubmissionIn(BaseModel):
    task: str
    gpu_type: str = "H100"
    mode: str = "test"
    code: str = Field(description="the submission: a .py file defining custom_kernel(data)")
    filename: str = "submission.py"


# ---------------------------------------------------------------- request rate limit


class RequestLimiter:
    """A sliding one-minute window of requests per client key (user, or address), in this process."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._hits: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()

    def check(self, key: str) -> int | None:
        """None if allowed (and counted); else seconds until the next request would be allowed."""
        now = time.monotonic()
        with self._lock:
            hits = self._hits[key]
            while hits and hits[0] <= now - 60.0:
                hits.popleft()
            if len(hits) >= self.per_minute:
                return max(1, math.ceil(hits[0] + 60.0 - now))
            hits.append(now)
            return None


def check_limit(limiter: RequestLimiter, key: str) -> None:
    """Count one request for `key`; RateLimited (429, with Retry-After) past the limit."""
    wait = limiter.check(key)
    if wait is not None:
        raise RateLimited(f"too many requests: at most {limiter.per_minute} per minute; retry in {wait} s",
                          retry_after_s=wait)


def limiter_key(who: Principal | None, request: Request) -> str:
    """A valid token counts for its user (all of their tokens together); anything else, a bogus token included,
    counts for the client's address, so inventing tokens buys no extra requests."""
    if who is not None:
        return f"u:{who.user_id}" if who.user_id is not None else "admin"
    return "a:" + (request.client.host if request.client else "unknown")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


def _one_line_validation(err: RequestValidationError) -> str:
    first = err.errors()[0] if err.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
    return f"invalid request: {where}: {first.get('msg', 'bad value')}"


def body_limit_for(settings: Settings):  # type: ignore[no-untyped-def]
    """The per-path limit of BodyLimit: routes carrying code get room for it, every other route a small one."""
    json_code = JSON_ESCAPE_FACTOR * settings.max_code_bytes + BODY_OVERHEAD_BYTES
    form_code = settings.max_code_bytes + BODY_OVERHEAD_BYTES

    def limit_for(path: str) -> int:
        if path == SUBMISSION_PATHS[0]:
            return json_code
        if path == SUBMISSION_PATHS[1]:
            return form_code
        return SMALL_BODY_BYTES

    return limit_for


# ---------------------------------------------------------------- the app


def create_app(settings: Settings, db: Database | None = None) -> FastAPI:
    """The FastAPI app. Opens `settings.db_url` (upgrading the schema and seeding a fresh database) unless a
    Database is given."""
    if db is None:
        db = open_database(settings.db_url)
    service.seed_fresh_database(db, settings)
    # FastAPIOffline serves Swagger UI and ReDoc from files in its package: /docs works with no internet.
    app = FastAPIOffline(title="swizzlelab leaderboard", version="1", static_url=DOCS_STATIC, description=(
        "Submit Triton kernels for swizzlelab's tasks; each submission is tested, timed, ranked or profiled on a "
        "real GPU by an isolated evaluator. Authenticate with 'Authorization: Bearer TOKEN'. A submission's code, "
        "report, stdout and stderr are its owner's and the admins' alone; others see its user, time, status and "
        "score (and its code once a leaderboard that publishes code has passed its deadline)."))
    app.state.db = db
    app.state.settings = settings

    def refuse(path: str, status: int, reason: str) -> Response:
        if status == 413 and path in SUBMISSION_PATHS:
            reason += f"; a submission's code may be at most {settings.max_code_bytes} bytes"
        page = getattr(app.state, "error_page", None)  # set by the web pages for their own routes
        if page is not None and not path.startswith("/api/"):
            return page(status, reason)
        return _error(status, reason)

    app.add_middleware(BodyLimit, limit_for=body_limit_for(settings), refuse=refuse)
    app.add_middleware(SecurityHeaders)
    # One request limiter for the API and the web forms that take a token (login, submit): a token guessed through
    # a form counts for the address as one guessed through the API.
    app.state.limiter = RequestLimiter(settings.requests_per_minute)

    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, err: ServiceError) -> JSONResponse:
        headers = {}
        if err.retry_after_s is not None:
            headers["Retry-After"] = str(err.retry_after_s)
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return _error(err.status, str(err), headers)

    @app.exception_handler(UserError)
    async def _user_error(_request: Request, err: UserError) -> JSONResponse:
        return _error(400, str(err).splitlines()[0] if str(err) else type(err).__name__)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _one_line_validation(err))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail).splitlines()[0], dict(err.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        LOG.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, f"internal error ({type(err).__name__}); the server log has the details")

    app.include_router(api_router(db, settings, app.state.limiter), prefix="/api")
    _mount_web(app, settings)
    return app


def _mount_web(app: FastAPI, settings: Settings) -> None:
    # The web pages (issue 13) live in the package swizzlelab.leaderboard.web. When it exists it must define
    # mount(app, settings) and add its routes there; it finds the database as app.state.db.
    if importlib.util.find_spec(WEB_MODULE) is None:
        return
    web = importlib.import_module(WEB_MODULE)
    mount = getattr(web, "mount", None)
    if mount is not None:
        mount(app, settings)


def api_router(db: Database, settings: Settings, limiter: RequestLimiter) -> APIRouter:
    """Every /api route. Each request is counted by the request limiter first (a router dependency), then the
    route's own checks run; authentication is read once per request and shared by both."""
    bearer = HTTPBearer(auto_error=False, description="a token from `swizzlelab user add NAME`")

    def credentials(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
                    ) -> tuple[Principal | None, ServiceError | None]:
        if creds is None:
            return None, Unauthorized("missing bearer token: send 'Authorization: Bearer TOKEN' "
                                      "(swizzlelab user add NAME makes one)")
        try:
            with db.read() as session:
                return authenticate(session, creds.credentials, settings.admin_token), None
        except (Unauthorized, Forbidden) as err:
            return None, err

    Auth = Annotated[tuple[Principal | None, ServiceError | None], Depends(credentials)]

    def limited(request: Request, auth_result: Auth) -> None:
        check_limit(limiter, limiter_key(auth_result[0], request))

    def principal(auth_result: Auth) -> Principal:
        who, err = auth_result
        if who is None:
            assert err is not None
            raise err
        return who

    def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.is_admin:
            raise Forbidden("this route needs an admin token")
        return who

    Who = Annotated[Principal, Depends(principal)]
    Admin = Annotated[Principal, Depends(admin)]
    router = APIRouter(dependencies=[Depends(limited)])

    def board_of(session: Any, task: str, gpu_type: str, who: Principal | None = None) -> Leaderboard:
        board = service.find_leaderboard(session, task, gpu_type, include_hidden=bool(who and who.is_admin))
        assert board is not None
        return board

    @router.get("/health", summary="Liveness, database, and the GPU types of connected workers")
    def health() -> dict[str, Any]:
        with db.read() as session:
            session.execute(select(1))
            now = presence.connected(session, settings)
        return {"ok": True, "database": db.engine.dialect.name,
                "workers": {"connected": now.count, "gpu_types": sorted(now.gpu_types)}}

    @router.get("/me", summary="Who the token belongs to")
    def me(who: Who) -> dict[str, Any]:
        return {"name": who.name, "admin": who.is_admin}

    # ------------------------------------------------------------ users and tokens (admin)

    @router.post("/users", status_code=201, summary="Create a user and its first token (admin)")
    def add_user(body: UserIn, _: Admin) -> dict[str, Any]:
        with db.write() as session:
            user, token = create_user(session, body.name, body.admin)
            return {"id": user.id, "name": user.name, "admin": user.is_admin, "token": token}

    @router.get("/users", summary="Every user, with live tokens and submissions counted (admin)")
    def users(_: Admin) -> list[dict[str, Any]]:
        with db.read() as session:
            return auth.user_views(session)

    @router.post("/users/{name}/revoke", summary="Ban a user and revoke all their tokens (admin)")
    def revoke_user(name: str, _: Admin) -> dict[str, Any]:
        with db.write() as session:
            return auth.revoke_user(session, name)

    @router.post("/users/{name}/tokens", status_code=201, summary="A further token for a user (admin)")
    def add_token(name: str, _: Admin) -> dict[str, Any]:
        with db.write() as session:
            user, token = auth.new_token_for(session, name)
            return {"name": user.name, "token": token}

    @router.get("/tokens", summary="Tokens (their first characters only), of one user when named (admin)")
    def tokens(_: Admin, user: str | None = None) -> list[dict[str, Any]]:
        with db.read() as session:
            return auth.token_views(session, user)

    @router.post("/tokens/{token_id}/revoke", summary="Revoke one token (admin)")
    def revoke_token(token_id: int, _: Admin) -> dict[str, Any]:
        with db.write() as session:
            return auth.revoke_token(session, token_id)

    @router.get("/workers", summary="Announced workers, their GPU types and when each was last seen (admin)")
    def workers(_: Admin) -> list[dict[str, Any]]:
        with db.read() as session:
            return presence.worker_views(session, settings)

    # ------------------------------------------------------------ tasks and leaderboards

    @router.get("/tasks", summary="The tasks one can submit to")
    def tasks() -> list[dict[str, Any]]:
        return service.task_views()

    @router.get("/leaderboards", summary="Every visible leaderboard (an admin sees hidden ones too)")
    def leaderboards(auth_result: Auth) -> list[dict[str, Any]]:
        who = auth_result[0]
        with db.read() as session:
            query = select(Leaderboard).order_by(Leaderboard.task, Leaderboard.gpu_type)
            if not (who and who.is_admin):
                query = query.where(Leaderboard.visible.is_(True))
            return [service.leaderboard_view(b) for b in session.scalars(query).all()]

    @router.post("/leaderboards", status_code=201, summary="Create a leaderboard (admin)")
    def add_leaderboard(body: LeaderboardIn, _: Admin) -> dict[str, Any]:
        with db.write() as session:
            board = service.create_leaderboard(session, body.task, body.gpu_type, body.deadline, body.visible,
                                               body.publish_code)
            return service.leaderboard_view(board)

    @router.patch("/leaderboards/{task}/{gpu_type}", summary="Change a deadline, visibility or code publishing (admin)")
    def patch_leaderboard(task: str, gpu_type: str, body: LeaderboardPatch, who: Admin) -> dict[str, Any]:
        if body.clear_deadline and body.deadline is not None:
            raise BadRequest("give a deadline or clear_deadline, not both")
        deadline: Any = None if body.clear_deadline else body.deadline if body.deadline is not None else "keep"
        with db.write() as session:
            board = service.update_leaderboard(session, board_of(session, task, gpu_type, who), deadline,
                                               body.visible, body.publish_code)
            return service.leaderboard_view(board)

    @router.get("/leaderboards/{task}/{gpu_type}", summary="One leaderboard")
    def leaderboard(task: str, gpu_type: str, auth_result: Auth) -> dict[str, Any]:
        with db.read() as session:
            return service.leaderboard_view(board_of(session, task, gpu_type, auth_result[0]))

    @router.get("/leaderboards/{task}/{gpu_type}/ranking",
                summary="Each user's best passed ranked run, by score, ties by submission time")
    def leaderboard_ranking(task: str, gpu_type: str, auth_result: Auth) -> dict[str, Any]:
        with db.read() as session:
            board = board_of(session, task, gpu_type, auth_result[0])
            return {"leaderboard": service.leaderboard_view(board),
                    "ranking": [row.to_dict() for row in ranking(session, board)]}

    @router.put("/rate-limits", summary="Set a per-user submission limit (admin)")
    def put_rate_limit(body: RateLimitIn, who: Admin) -> dict[str, Any]:
        if (body.task is None) != (body.gpu_type is None):
            raise BadRequest("give both task and gpu_type for one leaderboard, or neither for all")
        with db.write() as session:
            board = board_of(session, body.task, body.gpu_type, who) if body.task and body.gpu_type else None
            rule = service.set_rate_limit(session, board, body.mode, body.max_submissions, body.window_s)
            return {"id": rule.id, "leaderboard": board.name if board else None, "mode": rule.mode,
                    "max_submissions": rule.max_submissions, "window_s": rule.window_s}

    # ------------------------------------------------------------ submissions and runs

    @router.post("/submissions", status_code=201, summary="Submit code to a leaderboard",
                 description="Refused with 409 when no connected worker can run the mode on the leaderboard's GPU "
                             "type (test mode runs on any worker, and is taken even while none is connected).")
    def submit(body: SubmissionIn, who: Who) -> dict[str, Any]:
        if who.user_id is None:
            raise Forbidden("the admin token cannot submit; create a user (POST /api/users) and use its token")
        if len(body.code.encode("utf-8")) > settings.max_code_bytes:
            raise TooLarge(f"code is {len(body.code.encode('utf-8'))} bytes; the limit is {settings.max_code_bytes} bytes")
        with db.write() as session:
            board = board_of(session, body.task, body.gpu_type, who)
            reason = presence.refusal(session, settings, body.mode, board.gpu_type) if body.mode in MODES else None
            if reason:
                raise Conflict(reason)
            sub = service.create_submission(session, settings, who.user_id, body.task, body.gpu_type, body.mode,
                                            body.code, body.filename, may_see_hidden=who.is_admin)
            return service.submission_view(sub, presence.waiting_reason(session, settings, sub))

    @router.get("/submissions", summary="Your submissions, newest first (an admin's: everyone's, or one user's)")
    def my_submissions(who: Who, limit: int = 50, status: str | None = None, user: str | None = None
                       ) -> list[dict[str, Any]]:
        with db.read() as session:
            query = select(Submission).order_by(Submission.id.desc()).limit(max(1, min(limit, 500)))
            if not who.is_admin:
                query = query.where(Submission.user_id == who.user_id)
            elif user is not None:
                query = query.where(Submission.user_id == auth.find_user(session, user).id)
            if status is not None:
                query = query.where(Submission.status == status)
            now = presence.connected(session, settings)
            return [service.submission_view(s, presence.waiting_reason(session, settings, s, now))
                    for s in session.scalars(query).all()]

    @router.get("/submissions/{submission_id}", summary="A submission's status, verdict and runs (yours)")
    def submission(submission_id: int, who: Who) -> dict[str, Any]:
        with db.read() as session:
            sub = service.get_submission(session, submission_id, who.user_id, who.is_admin)
            return service.submission_view(sub, presence.waiting_reason(session, settings, sub))

    @router.get("/submissions/{submission_id}/code", summary="A submission's code (yours; or published)")
    def submission_code(submission_id: int, auth_result: Auth) -> dict[str, Any]:
        who = auth_result[0]
        with db.read() as session:
            sub = session.get(Submission, submission_id) if in_id_range(submission_id, session) else None
            if sub is None or not service.code_visible(sub, who.user_id if who else None, bool(who and who.is_admin)):
                if who is None and auth_result[1] is not None:
                    raise auth_result[1]  # not public: the caller's token is what is missing
                raise NotFound(f"submission {submission_id} not found")
            return service.code_view(sub)

    @router.get("/submissions/{submission_id}/suggestion",
                summary="Which block order would make your kernel faster: predicted and measured (yours)")
    def submission_suggestion(submission_id: int, who: Who) -> dict[str, Any]:
        with db.read() as session:
            return suggestions.view(suggestions.find(session, submission_id, who.user_id, who.is_admin))

    @router.get("/submissions/{submission_id}/suggestion/patched",
                summary="Your file with only its block-order site replaced by the suggested order (yours)")
    def suggestion_patched(submission_id: int, who: Who) -> Response:
        with db.read() as session:
            row = suggestions.find(session, submission_id, who.user_id, who.is_admin)
            if not row.patched_code:
                raise NotFound(f"submission {submission_id}'s suggestion has no patched kernel "
                               f"({row.headline or row.note or row.status})")
            name = download_name(f"suggested_{row.submission.filename}", f"suggested-{submission_id}.py")
            return Response(row.patched_code.encode("utf-8"), media_type="text/x-python; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @router.post("/submissions/{submission_id}/cancel", summary="Cancel your submission while it is queued")
    def cancel(submission_id: int, who: Who) -> dict[str, Any]:
        with db.write() as session:
            sub = service.get_submission(session, submission_id, who.user_id, who.is_admin)
            return service.submission_view(service.cancel_submission(session, sub))

    @router.get("/runs/{run_id}", summary="A run's full result and report (of your submission)")
    def run(run_id: int, who: Who) -> dict[str, Any]:
        with db.read() as session:
            return service.run_view(service.get_run(session, run_id, who.user_id, who.is_admin), who.is_admin)

    @router.get("/runs/{run_id}/files/{file_id}", summary="A profile run's .ncu-rep file (of your submission)")
    def run_file(run_id: int, file_id: int, who: Who) -> Response:
        with db.read() as session:
            service.get_run(session, run_id, who.user_id, who.is_admin)
            row = session.get(ProfileFile, file_id) if in_id_range(file_id, session) else None
            if row is None or row.run_id != run_id:
                raise NotFound(f"file {file_id} of run {run_id} not found")
            name = download_name(row.name, f"run-{run_id}.ncu-rep")
            return Response(row.content, media_type="application/octet-stream",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})

    return router
