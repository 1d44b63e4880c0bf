"""The REST API (FastAPI, documented at /docs and /openapi.json): users, tasks, leaderboards, submissions, runs,
rankings; bearer-token auth, request and submission rate limits, size limits, one-line 4xx errors.

`create_app(settings)` opens (and upgrades, and on a fresh database seeds) the database and mounts the web pages
of swizzlelab.leaderboard.web when that package is present.
"""


import collections
import datetime as dt
import hashlib
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
from pydantic import BaseModel, Field
from sqlalchemy import select
from starlette.exceptions import HTTPException as StarletteHTTPException

from swizzlelab.errors import UserError
from swizzlelab.leaderboard import service
from swizzlelab.leaderboard.auth import Principal, authenticate, create_user
from swizzlelab.leaderboard.db import Database, Leaderboard, ProfileFile, Submission, open_database
from swizzlelab.leaderboard.errors import BadRequest, Forbidden, NotFound, ServiceError, TooLarge
from swizzlelab.leaderboard.ranking import ranking
from swizzlelab.leaderboard.settings import Settings

# No `from __future__ import annotations` here: FastAPI reads the Depends(...) closures in route signatures.
LOG = logging.getLogger("swizzlelab.leaderboard")
WEB_MODULE = "swizzlelab.leaderboard.web"
BODY_OVERHEAD_BYTES = 16 * 1024  # JSON quoting and the other fields of a submission request


# ---------------------------------------------------------------- request bodies


class UserIn(BaseModel):
    name: str = Field(description="1-64 letters, digits, '_', '.', '-'")
    admin: bool = False


class LeaderboardIn(BaseModel):
    task: str
    gpu_type: str = "H100"
    deadline: dt.datetime | None = Field(None, description="ISO 8601 with a time zone; none = open forever")
    visible: bool = True


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
    """A sliding one-minute window of requests per client key (token hash or address), in this process."""

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


def _client_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if auth:
        return "t:" + hashlib.sha256(auth.encode()).hexdigest()[:24]
    return "a:" + (request.client.host if request.client else "unknown")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


def _one_line_validation(err: RequestValidationError) -> str:
    first = err.errors()[0] if err.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
    return f"invalid request: {where}: {first.get('msg', 'bad value')}"


# ---------------------------------------------------------------- the app


def create_app(settings: Settings, db: Database | None = None) -> FastAPI:
    """The FastAPI app. Opens `settings.db_url` (upgrading the schema and seeding a fresh database) unless a
    Database is given."""
    if db is None:
        db = open_database(settings.db_url)
    service.seed_fresh_database(db, settings)
    app = FastAPI(title="swizzlelab leaderboard", version="1", description=(
        "Submit Triton kernels for swizzlelab's tasks; each submission is tested, timed, ranked or profiled on a "
        "real GPU by an isolated evaluator. Authenticate with 'Authorization: Bearer TOKEN'."))
    app.state.db = db
    app.state.settings = settings
    limiter = RequestLimiter(settings.requests_per_minute)

    @app.middleware("http")
    async def _limits(request: Request, call_next: Any) -> Response:
        if request.url.path.startswith("/api/"):
            length = request.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > settings.max_code_bytes + BODY_OVERHEAD_BYTES:
                return _error(413, f"request body is {length} bytes; code may be at most {settings.max_code_bytes} bytes")
            wait = limiter.check(_client_key(request))
            if wait is not None:
                return _error(429, f"too many requests: at most {settings.requests_per_minute} per minute; "
                                   f"retry in {wait} s", {"Retry-After": str(wait)})
        return await call_next(request)

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

    app.include_router(api_router(db, settings), prefix="/api")
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


def api_router(db: Database, settings: Settings) -> APIRouter:
    router = APIRouter()
    bearer = HTTPBearer(auto_error=False, description="a token from `swizzlelab user add NAME`")

    def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
        with db.read() as session:
            return authenticate(session, creds.credentials if creds else None, settings.admin_token)

    def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.is_admin:
            raise Forbidden("this route needs an admin token")
        return who

    def board_of(session: Any, task: str, gpu_type: str, who: Principal | None = None) -> Leaderboard:
        board = service.find_leaderboard(session, task, gpu_type)
        assert board is not None
        if not board.visible and not (who and who.is_admin):
            raise NotFound(f"no leaderboard for task {task!r} on {gpu_type}")
        return board

    @router.get("/health", summary="Liveness and database check")
    def health() -> dict[str, Any]:
        with db.read() as session:
            session.execute(select(1))
        return {"ok": True, "database": db.engine.dialect.name}

    @router.get("/me", summary="Who the token belongs to")
    def me(who: Annotated[Principal, Depends(principal)]) -> dict[str, Any]:
        return {"name": who.name, "admin": who.is_admin}

    @router.post("/users", status_code=201, summary="Create a user and its first token (admin)")
    def add_user(body: UserIn, _: Annotated[Principal, Depends(admin)]) -> dict[str, Any]:
        with db.write() as session:
            user, token = create_user(session, body.name, body.admin)
            return {"id": user.id, "name": user.name, "admin": user.is_admin, "token": token}

    @router.get("/tasks", summary="The tasks one can submit to")
    def tasks() -> list[dict[str, Any]]:
        return service.task_views()

    @router.get("/leaderboards", summary="Every visible leaderboard")
    def leaderboards() -> list[dict[str, Any]]:
        with db.read() as session:
            boards = session.scalars(select(Leaderboard).where(Leaderboard.visible.is_(True))
                                     .order_by(Leaderboard.task, Leaderboard.gpu_type)).all()
            return [service.leaderboard_view(b) for b in boards]

    @router.post("/leaderboards", status_code=201, summary="Create a leaderboard (admin)")
    def add_leaderboard(body: LeaderboardIn, _: Annotated[Principal, Depends(admin)]) -> dict[str, Any]:
        with db.write() as session:
            board = service.create_leaderboard(session, body.task, body.gpu_type, body.deadline, body.visible)
            return service.leaderboard_view(board)

    @router.get("/leaderboards/{task}/{gpu_type}", summary="One leaderboard")
    def leaderboard(task: str, gpu_type: str) -> dict[str, Any]:
        with db.read() as session:
            return service.leaderboard_view(board_of(session, task, gpu_type))

    @router.get("/leaderboards/{task}/{gpu_type}/ranking",
                summary="Each user's best passed ranked run, by score, ties by submission time")
    def leaderboard_ranking(task: str, gpu_type: str) -> dict[str, Any]:
        with db.read() as session:
            board = board_of(session, task, gpu_type)
            return {"leaderboard": service.leaderboard_view(board),
                    "ranking": [row.to_dict() for row in ranking(session, board)]}

    @router.put("/rate-limits", summary="Set a per-user submission limit (admin)")
    def put_rate_limit(body: RateLimitIn, _: Annotated[Principal, Depends(admin)]) -> dict[str, Any]:
        if (body.task is None) != (body.gpu_type is None):
            raise BadRequest("give both task and gpu_type for one leaderboard, or neither for all")
        with db.write() as session:
            board = board_of(session, body.task, body.gpu_type) if body.task and body.gpu_type else None
            rule = service.set_rate_limit(session, board, body.mode, body.max_submissions, body.window_s)
            return {"id": rule.id, "leaderboard": board.name if board else None, "mode": rule.mode,
                    "max_submissions": rule.max_submissions, "window_s": rule.window_s}

    @router.post("/submissions", status_code=201, summary="Submit code to a leaderboard")
    def submit(body: SubmissionIn, who: Annotated[Principal, Depends(principal)]) -> dict[str, Any]:
        if who.user_id is None:
            raise Forbidden("the admin token cannot submit; create a user (POST /api/users) and use its token")
        if len(body.code.encode("utf-8")) > settings.max_code_bytes:
            raise TooLarge(f"code is {len(body.code.encode('utf-8'))} bytes; the limit is {settings.max_code_bytes} bytes")
        with db.write() as session:
            board_of(session, body.task, body.gpu_type, who)
            sub = service.create_submission(session, settings, who.user_id, body.task, body.gpu_type, body.mode,
                                            body.code, body.filename)
            return service.submission_view(sub)

    @router.get("/submissions", summary="Your submissions, newest first")
    def my_submissions(who: Annotated[Principal, Depends(principal)], limit: int = 50) -> list[dict[str, Any]]:
        with db.read() as session:
            query = select(Submission).order_by(Submission.id.desc()).limit(max(1, min(limit, 500)))
            if not who.is_admin:
                query = query.where(Submission.user_id == who.user_id)
            return [service.submission_view(s) for s in session.scalars(query).all()]

    @router.get("/submissions/{submission_id}", summary="A submission's status, verdict and runs")
    def submission(submission_id: int, who: Annotated[Principal, Depends(principal)]) -> dict[str, Any]:
        with db.read() as session:
            return service.submission_view(service.get_submission(session, submission_id, who.user_id, who.is_admin))

    @router.get("/runs/{run_id}", summary="A run's full result and report")
    def run(run_id: int, who: Annotated[Principal, Depends(principal)]) -> dict[str, Any]:
        with db.read() as session:
            return service.run_view(service.get_run(session, run_id, who.user_id, who.is_admin), who.is_admin)

    @router.get("/runs/{run_id}/files/{file_id}", summary="A profile run's .ncu-rep file")
    def run_file(run_id: int, file_id: int, who: Annotated[Principal, Depends(principal)]) -> Response:
        with db.read() as session:
            service.get_run(session, run_id, who.user_id, who.is_admin)
            row = session.get(ProfileFile, file_id)
            if row is None or row.run_id != run_id:
                raise NotFound(f"file {file_id} of run {run_id} not found")
            return Response(row.content, media_type="application/octet-stream",
                            headers={"Content-Disposition": f'attachment; filename="{row.name}"'})

    return router
