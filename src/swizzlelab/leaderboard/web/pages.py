"""Routes of the web pages (index, leaderboard, submission, user, submit form, downloads, static files) on the
service's FastAPI app; `mount(app, settings)` adds them. Pages read the database the app holds as app.state.db.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import importlib.util
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from swizzlelab.leaderboard import service
from swizzlelab.leaderboard.auth import authenticate
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.errors import BadRequest, Forbidden, NotFound, ServiceError, TooLarge
from swizzlelab.leaderboard.settings import MODES, Settings
from swizzlelab.leaderboard.web import queries
from swizzlelab.leaderboard.web.render import STATIC, highlight_python, pygments_css, render, submission_url
from swizzlelab.tasks.registry import BUILTIN_DIR

# Pages of queued or running submissions reload themselves this often (a meta refresh: works without JS).
REFRESH_S = 2
CSRF_COOKIE = "swizzlelab_csrf"
FORM_OVERHEAD_BYTES = 16 * 1024  # multipart boundaries and the form's other fields
MODE_HELP = {
    "test": "correctness only (runs on a CPU worker too)",
    "benchmark": "correctness and timing",
    "ranked": "timing that enters the leaderboard, plus a secret-seed run",
    "profile": "Nsight Compute metrics and the .ncu-rep",
}
TITLES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 409: "Conflict",
          411: "Length required", 413: "Too large", 429: "Too many requests"}
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _plotly_js() -> Path | None:
    """plotly.min.js as the plotly package ships it (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


@lru_cache(maxsize=8)
def _static_body(name: str) -> tuple[bytes, bytes, str] | None:
    """(raw, gzipped, media type) of a static file, read and compressed once per process."""
    if name == "pygments.css":
        raw, kind = pygments_css().encode(), STATIC_TYPES[".css"]
    elif name == "plotly.min.js":
        path = _plotly_js()
        if path is None:
            return None
        raw, kind = path.read_bytes(), STATIC_TYPES[".js"]
    else:
        path = STATIC / name
        if "/" in name or name.startswith(".") or not path.is_file() or path.suffix not in STATIC_TYPES:
            return None
        raw, kind = path.read_bytes(), STATIC_TYPES[path.suffix]
    return raw, gzip.compress(raw, 6, mtime=0), kind


class CsrfGuard:
    """Double-submit CSRF tokens: a random nonce in a SameSite=Strict, HttpOnly cookie and its HMAC (under a
    per-server key) in the form. A cross-site page can neither read the cookie nor forge the HMAC."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def issue(self, request: Request) -> tuple[str, str | None]:
        """(form token, new cookie value or None when the browser's cookie can be kept)."""
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if len(nonce) != 43:
            nonce = secrets.token_urlsafe(32)
            return self.sign(nonce), nonce
        return self.sign(nonce), None

    def check(self, request: Request, form_token: str) -> None:
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
            raise Forbidden(f"form posted from another site ({origin}); submit from this server's own page")
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if not nonce or not form_token or not hmac.compare_digest(self.sign(nonce), form_token):
            raise Forbidden("the form's security token is missing or stale; reload the submit page and try again")


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _error_page(err: ServiceError, status: int | None = None) -> HTMLResponse:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    headers = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else {}
    code = status or err.status
    page = _html(render("error.html.j2", status_code=code, title=TITLES.get(code, "Error"), reason=reason), code)
    page.headers.update(headers)
    return page


def web_router(db: Database, settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    csrf = CsrfGuard()

    @router.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        with db.read() as session:
            return _html(render("index.html.j2", rows=queries.index_rows(session)))

    @router.get("/lb/{task}/{gpu}", response_class=HTMLResponse)
    def leaderboard(task: str, gpu: str) -> HTMLResponse:
        try:
            with db.read() as session:
                board = queries.find_board(session, task, gpu)
                points = queries.ranked_points(session, board.id)
                rows = queries.ranked_rows(session, board, points)
                plots = queries.progress_plots(session, board, rows, points)
                view = queries.board_view(session, board)
        except ServiceError as err:
            return _error_page(err)
        return _html(render("leaderboard.html.j2", lb=view, rows=rows, plots=plots))

    def _task_file(task: str, gpu: str, name: str, download: str) -> Response:
        with db.read() as session:
            queries.find_board(session, task, gpu)
        path = BUILTIN_DIR / task / name
        if not path.is_file():
            raise NotFound(f"task {task!r} has no {name}")
        return Response(path.read_bytes(), media_type="text/x-python; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{task}_{download}"'})

    @router.get("/lb/{task}/{gpu}/reference.py")
    def reference(task: str, gpu: str) -> Response:
        try:
            return _task_file(task, gpu, "reference.py", "reference.py")
        except ServiceError as err:
            return _error_page(err)

    @router.get("/lb/{task}/{gpu}/starter.py")
    def starter(task: str, gpu: str) -> Response:
        try:
            return _task_file(task, gpu, "kernel.py", "starter.py")
        except ServiceError as err:
            return _error_page(err)

    @router.get("/submissions/{submission_id}", response_class=HTMLResponse)
    def submission(submission_id: int) -> HTMLResponse:
        try:
            with db.read() as session:
                view = queries.submission_view(session, submission_id)
        except ServiceError as err:
            return _error_page(err)
        view.code_html = highlight_python(view.code)
        return _html(render("submission.html.j2", sub=view,
                            refresh_s=None if view.done else REFRESH_S))

    @router.get("/submissions/{submission_id}/code.py")
    def submission_code(submission_id: int) -> Response:
        try:
            with db.read() as session:
                filename, code = queries.submission_code(session, submission_id)
        except ServiceError as err:
            return _error_page(err)
        return Response(code.encode("utf-8"), media_type="text/x-python; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    @router.get("/runs/{run_id}/profile.ncu-rep")
    def ncu_rep(run_id: int) -> Response:
        try:
            with db.read() as session:
                name, content = queries.profile_file(session, run_id)
        except ServiceError as err:
            return _error_page(err)
        safe = "".join(c for c in name if c.isalnum() or c in "._-") or f"run-{run_id}.ncu-rep"
        return Response(content, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{safe}"'})

    @router.get("/users/{name}", response_class=HTMLResponse)
    def user(name: str) -> HTMLResponse:
        try:
            with db.read() as session:
                view = queries.user_view(session, name)
        except ServiceError as err:
            return _error_page(err)
        return _html(render("user.html.j2", user=view))

    def _form(request: Request, status: int = 200, error: str = "", selected: str = "", mode: str = "test",
              headers: dict[str, str] | None = None) -> HTMLResponse:
        token, new_cookie = csrf.issue(request)
        with db.read() as session:
            boards = queries.board_choices(session)
        page = _html(render("submit.html.j2", csrf_token=token, leaderboards=boards, selected=selected,
                            modes=[{"name": m, "help": MODE_HELP.get(m, "")} for m in MODES], mode=mode,
                            error=error), status)
        if new_cookie is not None:
            page.set_cookie(CSRF_COOKIE, new_cookie, httponly=True, samesite="strict", path="/")
        page.headers.update(headers or {})
        return page

    @router.get("/submit", response_class=HTMLResponse)
    def submit_form(request: Request, leaderboard: str = "") -> HTMLResponse:
        return _form(request, selected=leaderboard)

    @router.post("/submit")
    def submit(
        request: Request,
        csrf_token: Annotated[str, Form()] = "",
        leaderboard: Annotated[str, Form()] = "",
        mode: Annotated[str, Form()] = "",
        token: Annotated[str, Form()] = "",
        file: Annotated[UploadFile | None, File()] = None,
    ) -> Response:
        try:
            csrf.check(request, csrf_token)
            task, _, gpu = leaderboard.partition("/")
            if not task or not gpu:
                raise BadRequest("choose a leaderboard")
            if file is None or not file.filename:
                raise BadRequest("choose a .py file to submit")
            raw = file.file.read(settings.max_code_bytes + 1)
            if len(raw) > settings.max_code_bytes:
                raise TooLarge(f"the file is larger than the limit of {settings.max_code_bytes} bytes")
            try:
                code = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"{file.filename} is not UTF-8 text; submit a .py source file") from None
            filename = Path(file.filename).name
            with db.write() as session:
                who = authenticate(session, token.strip(), settings.admin_token)
                if who.user_id is None:
                    raise Forbidden("the admin token cannot submit; use a user's token")
                queries.find_board(session, task, gpu)
                sub = service.create_submission(session, settings, who.user_id, task, gpu, mode, code, filename)
                sub_id = sub.id
        except ServiceError as err:
            reason = str(err).splitlines()[0]
            headers = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else None
            return _form(request, status=err.status, error=reason, selected=leaderboard, mode=mode or "test",
                         headers=headers)
        return RedirectResponse(submission_url(sub_id), status_code=303)

    @router.get("/static/{name}")
    def static(name: str, request: Request) -> Response:
        body = _static_body(name)
        if body is None:
            return Response(f"no static file {name!r}\n", status_code=404, media_type="text/plain")
        raw, packed, kind = body
        headers = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return Response(packed, media_type=kind, headers=headers)
        return Response(raw, media_type=kind, headers=headers)

    return router


def mount(app: FastAPI, settings: Settings) -> None:
    """Add the web pages to the service's app; they read the Database the app holds as app.state.db."""
    limit = settings.max_code_bytes + FORM_OVERHEAD_BYTES

    @app.middleware("http")
    async def _form_size(request: Request, call_next):  # type: ignore[no-untyped-def]
        # Refuse an oversized form before its body is parsed (the parser would spool any size to disk).
        if request.method == "POST" and request.url.path == "/submit":
            length = request.headers.get("content-length", "")
            if not length.isdigit():
                return _error_page(ServiceError("send the form with a Content-Length (a browser does)"), 411)
            if int(length) > limit:
                return _error_page(TooLarge(f"the form is {length} bytes; a submission may be at most "
                                            f"{settings.max_code_bytes} bytes"))
        return await call_next(request)

    app.include_router(web_router(app.state.db, settings))
