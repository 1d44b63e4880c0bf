"""Routes of the web pages (index, leaderboard, submission, user, submit form, login/logout, downloads, static
files) on the service's FastAPI app; `mount(app, settings)` adds them. Pages read the database the app holds as
app.state.db.

Logging in with an API token opens a session (an HttpOnly cookie whose hash the database keeps); its owner then
sees their submissions' code, reports and output, which everyone else is shown only as status and score. Every
form (submit, login, logout) carries a CSRF token.
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

from swizzlelab.leaderboard import auth, presence, service
from swizzlelab.leaderboard.api import check_limit, limiter_key
from swizzlelab.leaderboard.auth import Principal, authenticate
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.errors import BadRequest, Conflict, Forbidden, NotFound, ServiceError, TooLarge, Unauthorized
from swizzlelab.leaderboard.settings import MODES, Settings
from swizzlelab.leaderboard.web import queries
from swizzlelab.leaderboard.web.render import STATIC, highlight_python, pygments_css, render, submission_url
from swizzlelab.names import download_name
from swizzlelab.tasks.registry import BUILTIN_DIR

# Pages of queued or running submissions reload themselves this often (a meta refresh: works without JS).
REFRESH_S = 2
CSRF_COOKIE = "swizzlelab_csrf"
SESSION_COOKIE = "swizzlelab_session"
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
            raise Forbidden("the form's security token is missing or stale; reload the page and try again")


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _error_page(err: ServiceError, status: int | None = None, viewer: Principal | None = None) -> HTMLResponse:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    headers = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else {}
    code = status or err.status
    page = _html(render("error.html.j2", status_code=code, title=TITLES.get(code, "Error"), reason=reason,
                        viewer=viewer), code)
    page.headers.update(headers)
    return page


def _local_path(target: str) -> str:
    """A redirect target after login: a path on this server ("/..."), never another site ("//evil", "https:")."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or any(ord(c) < 32 for c in target):
        return "/"
    return target


def _set_session(response: Response, request: Request, cookie: str) -> None:
    response.set_cookie(SESSION_COOKIE, cookie, max_age=auth.SESSION_DAYS * 86400, httponly=True, samesite="lax",
                        secure=request.url.scheme == "https", path="/")


def _python_file(filename: str, code: str, fallback: str) -> Response:
    """A .py download under the file's own (checked) name."""
    name = download_name(filename, fallback)
    return Response(code.encode("utf-8"), media_type="text/x-python; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def web_router(db: Database, settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    csrf = CsrfGuard()

    def guarded(request: Request) -> None:
        """A form that checks a token counts against the API's request limit of the client's address."""
        limiter = getattr(request.app.state, "limiter", None)
        if limiter is not None:
            check_limit(limiter, limiter_key(None, request))

    def viewer(request: Request) -> Principal | None:
        """Who is logged in through this browser's session cookie (None: nobody, or the session ended)."""
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        with db.read() as session:
            return auth.web_session_principal(session, cookie, settings.admin_token)

    @router.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        who = viewer(request)
        with db.read() as session:
            return _html(render("index.html.j2", rows=queries.index_rows(session), viewer=who))

    @router.get("/lb/{task}/{gpu}", response_class=HTMLResponse)
    def leaderboard(task: str, gpu: str, request: Request) -> HTMLResponse:
        who = viewer(request)
        try:
            with db.read() as session:
                board = queries.find_board(session, task, gpu)
                points = queries.ranked_points(session, board.id)
                rows = queries.ranked_rows(session, board, points)
                plots = queries.progress_plots(session, board, rows, points)
                view = queries.board_view(session, board)
        except ServiceError as err:
            return _error_page(err, viewer=who)
        return _html(render("leaderboard.html.j2", lb=view, rows=rows, plots=plots, viewer=who))

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
    def submission(submission_id: int, request: Request) -> HTMLResponse:
        who = viewer(request)
        try:
            with db.read() as session:
                view = queries.submission_view(session, submission_id, who, settings)
        except ServiceError as err:
            return _error_page(err, viewer=who)
        view.code_html = highlight_python(view.code) if view.code_visible else ""
        return _html(render("submission.html.j2", sub=view, viewer=who,
                            refresh_s=None if view.done and not view.suggestion_pending else REFRESH_S))

    @router.get("/submissions/{submission_id}/code.py")
    def submission_code(submission_id: int, request: Request) -> Response:
        who = viewer(request)
        try:
            with db.read() as session:
                found = queries.submission_code(session, submission_id, who)
            if found is None:
                raise Forbidden(f"the code of submission {submission_id} is shown only to its owner and the admins; "
                                "log in as its owner")
        except ServiceError as err:
            return _error_page(err, viewer=who)
        return _python_file(*found, f"submission-{submission_id}.py")

    @router.get("/submissions/{submission_id}/suggestion.py")
    def suggestion_code(submission_id: int, request: Request) -> Response:
        who = viewer(request)
        try:
            with db.read() as session:
                found = queries.suggested_code(session, submission_id, who)
        except ServiceError as err:
            return _error_page(err, viewer=who)
        return _python_file(*found, f"suggested-{submission_id}.py")

    @router.get("/runs/{run_id}/profile.ncu-rep")
    def ncu_rep(run_id: int, request: Request) -> Response:
        who = viewer(request)
        try:
            with db.read() as session:
                name, content = queries.profile_file(session, run_id, who)
        except ServiceError as err:
            return _error_page(err, viewer=who)
        name = download_name(name, f"run-{run_id}.ncu-rep")
        return Response(content, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @router.get("/users/{name}", response_class=HTMLResponse)
    def user(name: str, request: Request) -> HTMLResponse:
        who = viewer(request)
        try:
            with db.read() as session:
                view = queries.user_view(session, name)
        except ServiceError as err:
            return _error_page(err, viewer=who)
        return _html(render("user.html.j2", user=view, viewer=who))

    def _with_csrf(request: Request, template: str, status: int = 200, headers: dict[str, str] | None = None,
                   **context: object) -> HTMLResponse:
        """A page holding a form: its CSRF token rendered in, its cookie set when the browser has none yet."""
        token, new_cookie = csrf.issue(request)
        page = _html(render(template, csrf_token=token, **context), status)
        if new_cookie is not None:
            page.set_cookie(CSRF_COOKIE, new_cookie, httponly=True, samesite="strict", path="/")
        page.headers.update(headers or {})
        return page

    def _form(request: Request, status: int = 200, error: str = "", selected: str = "", mode: str = "test",
              headers: dict[str, str] | None = None) -> HTMLResponse:
        who = viewer(request)
        with db.read() as session:
            boards = queries.board_choices(session)
        return _with_csrf(request, "submit.html.j2", status, headers, leaderboards=boards, selected=selected,
                          modes=[{"name": m, "help": MODE_HELP.get(m, "")} for m in MODES], mode=mode, error=error,
                          viewer=who)

    @router.get("/submit", response_class=HTMLResponse)
    def submit_form(request: Request, leaderboard: str = "") -> HTMLResponse:
        return _form(request, selected=leaderboard)

    @router.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> HTMLResponse:  # noqa: A002 - the query's name
        return _with_csrf(request, "login.html.j2", next_url=_local_path(next), error="", viewer=viewer(request))

    @router.post("/login")
    def login(
        request: Request,
        csrf_token: Annotated[str, Form()] = "",
        token: Annotated[str, Form()] = "",
        next_url: Annotated[str, Form()] = "/",
    ) -> Response:
        try:
            guarded(request)
            csrf.check(request, csrf_token)
            if not token.strip():
                raise Unauthorized("give your API token (swizzlelab user add NAME printed it)")
            with db.write() as session:
                cookie, _ = auth.start_web_session(session, token.strip(), settings.admin_token)
        except ServiceError as err:
            retry = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else None
            return _with_csrf(request, "login.html.j2", err.status, retry, next_url=_local_path(next_url),
                              error=str(err).splitlines()[0], viewer=None)
        answer = RedirectResponse(_local_path(next_url), status_code=303)
        _set_session(answer, request, cookie)
        return answer

    @router.get("/logout", response_class=HTMLResponse)
    def logout_form(request: Request) -> HTMLResponse:
        return _with_csrf(request, "logout.html.j2", viewer=viewer(request))

    @router.post("/logout")
    def logout(request: Request, csrf_token: Annotated[str, Form()] = "") -> Response:
        try:
            csrf.check(request, csrf_token)
        except ServiceError as err:
            return _error_page(err)
        with db.write() as session:
            auth.end_web_session(session, request.cookies.get(SESSION_COOKIE))
        answer = RedirectResponse("/", status_code=303)
        answer.delete_cookie(SESSION_COOKIE, path="/")
        return answer

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
            if token.strip():  # a token typed into the form is checked here: counted as a login
                guarded(request)
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
            logged_in = None if token.strip() else viewer(request)
            with db.write() as session:
                if logged_in is None and not token.strip():
                    raise Unauthorized("log in, or give your API token in the form")
                who = logged_in or authenticate(session, token.strip(), settings.admin_token)
                if who.user_id is None:
                    raise Forbidden("the admin token cannot submit; use a user's token")
                board = queries.find_board(session, task, gpu)
                reason = presence.refusal(session, settings, mode, board.gpu_type) if mode in MODES else None
                if reason:
                    raise Conflict(reason)
                sub = service.create_submission(session, settings, who.user_id, task, gpu, mode, code, filename,
                                                may_see_hidden=False)
                sub_id = sub.id
                # A token typed into the form logs its user in, so the page they land on shows them their report.
                cookie = auth.start_web_session(session, token.strip(), settings.admin_token)[0] \
                    if logged_in is None else None
        except ServiceError as err:
            reason = str(err).splitlines()[0]
            headers = {"Retry-After": str(err.retry_after_s)} if err.retry_after_s is not None else None
            return _form(request, status=err.status, error=reason, selected=leaderboard, mode=mode or "test",
                         headers=headers)
        answer = RedirectResponse(submission_url(sub_id), status_code=303)
        if cookie is not None:
            _set_session(answer, request, cookie)
        return answer

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
    """Add the web pages to the service's app; they read the Database the app holds as app.state.db. The app's
    streaming body limit (swizzlelab.leaderboard.bodylimit) answers an oversized form with this error page."""
    app.state.error_page = lambda status, reason: _error_page(ServiceError(reason), status)
    app.include_router(web_router(app.state.db, settings))
