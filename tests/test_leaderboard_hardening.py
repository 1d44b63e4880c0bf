"""Issue 45, the service's half, against a real `swizzlelab serve` (uvicorn on 127.0.0.1) on SQLite: privacy of
code and output (API, pages, login sessions, publishing after a deadline), one rule for names, streaming body
limits (chunked bodies without Content-Length), ids out of range, 404s naming only visible leaderboards, request
limits per user and per address, --db checks, cancelling, the admin's users and tokens through the CLI, and a real
CPU worker announcing itself while `submit` (not on a terminal) prints why it waits."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest

from leaderboard_support import ADMIN_TOKEN, child_env, kernel_source, start_service, swizzlelab
from swizzlelab.errors import UserError
from swizzlelab.names import BadName, check_file_name, check_gpu_type, check_user_name, download_name

HUGE_ID = 2**70


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """A server without workers (the last test starts one) and two users."""
    workdir = tmp_path_factory.mktemp("hardening")
    service = start_service(f"sqlite:///{workdir / 'leaderboard.db'}", workdir, "--workers", "0",
                            "--requests-per-minute", "100000")
    try:
        with service.client(ADMIN_TOKEN) as admin:
            service.tokens = {name: admin.post("/api/users", json={"name": name}).json()["token"]  # type: ignore[attr-defined]
                              for name in ("alice", "bob")}
        yield service
    finally:
        service.stop()


def _submit(svc, user: str, code: str = "SECRET_MARK = 1\n", mode: str = "test", **extra) -> httpx.Response:
    with svc.client(svc.tokens[user]) as api:
        return api.post("/api/submissions", json={"task": "histogram", "gpu_type": "H100", "mode": mode,
                                                  "code": code, **extra})


def _login(client: httpx.Client, token: str) -> httpx.Response:
    form = client.get("/login")
    csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', form.text).group(1)
    return client.post("/login", data={"csrf_token": csrf, "token": token, "next_url": "/"})


def _one_line(answer: httpx.Response) -> str:
    detail = answer.json()["detail"]
    assert "\n" not in detail and "Traceback" not in detail
    return detail


# ---------------------------------------------------------------- names (no server)


def test_one_rule_for_names_and_the_evaluator_uses_it():
    assert check_user_name("alice.b-2") == "alice.b-2" and check_file_name("my_kernel.v2.py") == "my_kernel.v2.py"
    assert check_gpu_type(" h100 ") == "H100"
    for bad in ("alice\n", "al\x07ice", "", "-alice", "a" * 65, "al ice", "ålice", None):
        with pytest.raises(BadName):
            check_user_name(bad)
    for bad in ("evil.py\n", "evil\n.py", ".py", "-x.py", "../x.py", "x.pyc", "a/b.py", "x" * 101 + ".py"):
        with pytest.raises(BadName) as err:
            check_file_name(bad)
        assert "\n" not in str(err.value)
    assert download_name('evil"\r\n.py', "fallback.py") == "evil.py" and download_name("\n", "f.py") == "f.py"
    from swizzlelab.harness.isolate import evaluate_isolated

    with pytest.raises(UserError, match="file name 'evil.py\\\\n' is not allowed"):
        evaluate_isolated("histogram", "def custom_kernel(d):\n    return d\n", "test", filename="evil.py\n")


# ---------------------------------------------------------------- privacy


def test_code_and_output_are_the_owners(svc):
    made = _submit(svc, "alice")
    assert made.status_code == 201, made.text
    sub_id = made.json()["id"]
    with svc.client(svc.tokens["bob"]) as bob:
        assert bob.get(f"/api/submissions/{sub_id}").status_code == 404
        assert bob.get(f"/api/submissions/{sub_id}/code").status_code == 404
    assert httpx.get(f"{svc.url}/api/submissions/{sub_id}/code").status_code == 401
    with svc.client(svc.tokens["alice"]) as alice:
        assert alice.get(f"/api/submissions/{sub_id}/code").json()["code"] == "SECRET_MARK = 1\n"

    with httpx.Client(base_url=svc.url, follow_redirects=True) as browser:
        page = browser.get(f"/submissions/{sub_id}")
        assert page.status_code == 200 and "SECRET_MARK" not in page.text and 'id="private-note"' in page.text
        assert "alice" in page.text and "queued" in page.text  # user and status are public
        assert browser.get(f"/submissions/{sub_id}/code.py").status_code == 403
        assert _login(browser, svc.tokens["bob"]).status_code == 200
        assert "SECRET_MARK" not in browser.get(f"/submissions/{sub_id}").text  # another user: still private
        browser.cookies.clear()
        logged_in = _login(browser, svc.tokens["alice"])
        assert logged_in.status_code == 200 and 'id="viewer"' in logged_in.text
        cookie = next(c for c in browser.cookies.jar if c.name == "swizzlelab_session")
        assert cookie.has_nonstandard_attr("HttpOnly") and len(cookie.value) >= 43
        assert "SECRET_MARK" in browser.get(f"/submissions/{sub_id}").text
        assert browser.get(f"/submissions/{sub_id}/code.py").text == "SECRET_MARK = 1\n"
        # A login form posted without its CSRF token is refused; a bad token shows the form again.
        assert browser.post("/login", data={"token": svc.tokens["alice"]}).status_code == 403
        bad = browser.post("/login", data={"csrf_token": "0" * 64, "token": "slb_nope"})
        assert bad.status_code == 403

        # Revoking the token the session was opened with ends the session at once.
        with svc.client(ADMIN_TOKEN) as admin:
            extra = admin.post("/api/users/alice/tokens").json()["token"]
            ids = [t["id"] for t in admin.get("/api/tokens", params={"user": "alice"}).json()]
            first = ids[0]
            assert admin.post(f"/api/tokens/{first}/revoke").json()["revoked"] is True
        again = browser.get(f"/submissions/{sub_id}")
        assert "SECRET_MARK" not in again.text and 'id="login-link"' in again.text
    svc.tokens["alice"] = extra

    # A leaderboard that publishes code shows it to everyone once its deadline has passed.
    with svc.client(ADMIN_TOKEN) as admin:
        changed = admin.patch("/api/leaderboards/histogram/H100",
                              json={"deadline": "2026-01-01T00:00:00+00:00", "publish_code": True}).json()
        assert changed["code_published"] is True
        try:
            assert httpx.get(f"{svc.url}/submissions/{sub_id}/code.py").text == "SECRET_MARK = 1\n"
            assert httpx.get(f"{svc.url}/api/submissions/{sub_id}/code").json()["filename"] == "submission.py"
        finally:
            admin.patch("/api/leaderboards/histogram/H100", json={"clear_deadline": True, "publish_code": False})
    assert httpx.get(f"{svc.url}/submissions/{sub_id}/code.py").status_code == 403


# ---------------------------------------------------------------- bad requests


def test_names_ids_and_hidden_leaderboards(svc):
    refused = _submit(svc, "bob", filename="evil.py\n")
    assert refused.status_code == 400 and "file name 'evil.py\\n' is not allowed" in _one_line(refused)
    assert _submit(svc, "bob", filename=".py").status_code == 400
    with svc.client(ADMIN_TOKEN) as admin:
        named = admin.post("/api/users", json={"name": "mallory\x1b[31m"})
        assert named.status_code == 400 and "user name" in _one_line(named)
        for path in (f"/api/submissions/{HUGE_ID}", f"/api/runs/{HUGE_ID}", f"/api/runs/1/files/{HUGE_ID}",
                     f"/api/submissions/{HUGE_ID}/code", "/api/submissions/-1"):
            answer = admin.get(path)
            assert answer.status_code == 404, (path, answer.text)
        assert admin.post(f"/api/tokens/{HUGE_ID}/revoke").status_code == 404
        assert admin.post(f"/api/submissions/{HUGE_ID}/cancel").status_code == 404
    for path in (f"/submissions/{HUGE_ID}", f"/submissions/{HUGE_ID}/code.py", f"/runs/{HUGE_ID}/profile.ncu-rep"):
        assert httpx.get(svc.url + path).status_code == 404, path

    with svc.client(ADMIN_TOKEN) as admin:
        assert admin.patch("/api/leaderboards/matmul/H200", json={"visible": False}).status_code == 200
        try:
            unknown = httpx.get(f"{svc.url}/api/leaderboards/nope/H100")
            assert unknown.status_code == 404 and "matmul-H100" in unknown.text and "matmul-H200" not in unknown.text
            assert httpx.get(f"{svc.url}/api/leaderboards/matmul/H200").status_code == 404
            assert "matmul-H200" not in httpx.get(f"{svc.url}/api/leaderboards").text
            with svc.client(svc.tokens["bob"]) as bob:
                hidden = bob.post("/api/submissions", json={"task": "matmul", "gpu_type": "H200", "code": "x = 1\n"})
                assert hidden.status_code == 404 and "matmul-H200" not in hidden.text
            assert admin.get("/api/leaderboards/matmul/H200").status_code == 200
            assert "matmul-H200" in admin.get("/api/leaderboards").text
        finally:
            admin.patch("/api/leaderboards/matmul/H200", json={"visible": True})


def _chunked_post(url: str, path: str, total: int, headers: str) -> tuple[int, int, str]:
    """POST a chunked body (no Content-Length) of up to `total` bytes through a raw socket, reading the answer as
    soon as one comes. Returns (status, bytes of body sent by then, the answer's first bytes)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nTransfer-Encoding: chunked\r\n{headers}\r\n".encode())
    chunk = b"7" * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent, answer = 0, b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 1.0)
            if readable:
                answer = sock.recv(65536)
                break
            if writable:
                try:
                    sock.sendall(frame)
                except (BrokenPipeError, ConnectionResetError):
                    answer = sock.recv(65536)
                    break
                sent += len(chunk)
            elif sent >= total:
                sock.sendall(b"0\r\n\r\n")
        answer += _rest_of_answer(sock, answer)
    finally:
        sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, sent, answer[:4000].decode("latin-1")


def _rest_of_answer(sock: socket.socket, start: bytes) -> bytes:
    """What is left of an answer whose first bytes were `start`: up to its Content-Length, or until closed."""
    more = b""
    sock.settimeout(10)
    while b"\r\n\r\n" in start + more:
        head, _, body = (start + more).partition(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
        if length is None or len(body) >= int(length.group(1)):
            break
        try:
            data = sock.recv(65536)
        except OSError:
            break
        if not data:
            break
        more += data
    return more


def _rss_kib(pid: int) -> int:
    status = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))


def test_chunked_bodies_are_cut_at_the_limit(svc):
    rss_before = _rss_kib(svc.process.pid)
    total = 400 * 1024 * 1024  # what the tester sent; the server must answer long before
    status, sent, answer = _chunked_post(svc.url, "/api/submissions", total,
                                         "Content-Type: application/json\r\nAuthorization: Bearer nope\r\n")
    assert status == 413, answer
    assert "this route takes at most" in answer and "65536 bytes" in answer
    assert sent < 32 * 1024 * 1024, f"the server read {sent} bytes before answering"
    status, sent, answer = _chunked_post(svc.url, "/submit", total,
                                         "Content-Type: multipart/form-data; boundary=b\r\n")
    assert status == 413 and "<html" in answer and sent < 32 * 1024 * 1024, answer
    grown_mib = (_rss_kib(svc.process.pid) - rss_before) / 1024
    assert grown_mib < 64, f"the server grew by {grown_mib:.0f} MiB"
    small = _chunked_post(svc.url, "/api/me", 1024 * 1024, "Authorization: Bearer nope\r\n")
    assert small[0] == 413  # every route has a limit, small ones for small bodies


def test_request_limit_per_user_and_per_address(tmp_path):
    limited = start_service(f"sqlite:///{tmp_path / 'limit.db'}", tmp_path, "--workers", "0",
                            "--requests-per-minute", "8")
    try:
        with limited.client(ADMIN_TOKEN) as admin:
            token = admin.post("/api/users", json={"name": "carol"}).json()["token"]
        codes = [httpx.get(f"{limited.url}/api/me", headers={"Authorization": f"Bearer bogus-{i}"}).status_code
                 for i in range(9)]
        # Inventing tokens buys nothing: they count for the address (as did start_service's own health checks).
        first = codes.index(429)
        assert set(codes[:first]) == {401} and set(codes[first:]) == {429}
        assert httpx.get(f"{limited.url}/api/tasks").status_code == 429
        with limited.client(token) as carol:
            mine = [carol.get("/api/me").status_code for _ in range(9)]
        assert mine == [200] * 8 + [429]
        assert int(carol_retry(limited.url, token)) > 0
    finally:
        limited.stop()


def carol_retry(url: str, token: str) -> str:
    return httpx.get(f"{url}/api/me", headers={"Authorization": f"Bearer {token}"}).headers["Retry-After"]


def test_db_option_is_checked_before_anything_is_made(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    serve = swizzlelab("serve", "--db", str(missing / "x.db"), "--workers", "0", cwd=tmp_path, timeout=120)
    assert serve.returncode == 2 and "does not exist" in serve.stderr and not missing.parent.exists()
    assert len(serve.stderr.strip().splitlines()) == 1
    worker = swizzlelab("worker", "--db", "not a url", cwd=tmp_path, timeout=120)
    assert worker.returncode == 2 and "neither a URL" in worker.stderr
    assert not (tmp_path / "not a url").exists()
    listing = swizzlelab("user", "list", "--db", str(missing / "x.db"), cwd=tmp_path, timeout=120)
    assert listing.returncode == 2 and not missing.parent.exists()


# ---------------------------------------------------------------- the user's and the admin's day (CLI)


def _spawn(*args: str, token: str | None = None) -> subprocess.Popen[str]:
    env = child_env(**({"SWIZZLELAB_TOKEN": token} if token else {}))
    return subprocess.Popen([sys.executable, "-m", "swizzlelab.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _done(proc: subprocess.Popen[str], code: int) -> str:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == code, f"exit {proc.returncode} (wanted {code}): {out[-2000:]} {err[-2000:]}"
    return out + err


def test_cli_lists_shows_cancels_and_administers(svc):
    ranked = _submit(svc, "bob", mode="ranked")
    assert ranked.status_code == 409
    assert _one_line(ranked) == ("no H100 worker connected: benchmark/ranked/profile submissions need one; "
                                 "test mode runs on any worker")
    queued = _submit(svc, "bob", code="BOB_CODE = 2\n").json()
    assert queued["waiting"] == "waiting for a worker; none connected"
    sub_id = queued["id"]
    page = httpx.get(f"{svc.url}/submissions/{sub_id}").text
    assert "waiting for a worker; none connected" in page

    bob = svc.tokens["bob"]
    listing = _spawn("submission", "list", "--server", svc.url, token=bob)
    showing = _spawn("submission", "show", str(sub_id), "--server", svc.url, token=bob)
    not_his = _spawn("submission", "cancel", str(sub_id), "--server", svc.url, token=svc.tokens["alice"])
    users = _spawn("user", "list", "--server", svc.url, "--token", ADMIN_TOKEN)
    tokens = _spawn("token", "list", "--user", "bob", "--server", svc.url, "--token", ADMIN_TOKEN)
    out = _done(listing, 0)
    assert str(sub_id) in out and "histogram-H100" in out and "waiting for a worker" in out
    out = _done(showing, 0)
    assert "BOB_CODE = 2" in out and "queued" in out
    assert "404" in _done(not_his, 2)
    out = _done(users, 0)
    assert "alice" in out and "bob" in out
    assert "slb_" in _done(tokens, 0)

    cancel = _spawn("submission", "cancel", str(sub_id), "--server", svc.url, token=bob)
    assert f"submission {sub_id}: cancelled" in _done(cancel, 0)
    again = _spawn("submission", "cancel", str(sub_id), "--server", svc.url, token=bob)
    shown = _spawn("submission", "show", str(sub_id), "--no-code", "--server", svc.url, token=bob)
    assert "409" in _done(again, 2)
    assert "cancelled" in _done(shown, 1)

    with svc.client(ADMIN_TOKEN) as admin:
        mallory = admin.post("/api/users", json={"name": "mallory"}).json()["token"]
    revoke = _spawn("user", "revoke", "mallory", "--server", svc.url, "--token", ADMIN_TOKEN)
    assert "mallory banned; 1 token(s) revoked" in _done(revoke, 0)
    assert httpx.get(f"{svc.url}/api/me", headers={"Authorization": f"Bearer {mallory}"}).status_code == 401
    denied = _spawn("user", "list", "--server", svc.url, "--token", bob)
    assert "403" in _done(denied, 2)


# ---------------------------------------------------------------- a real worker (last: it stays connected)


def test_worker_announces_itself_and_submit_says_why_it_waits(svc, tmp_path):
    good = tmp_path / "good.py"
    good.write_text(kernel_source(correct=True))
    submit = _spawn("submit", "histogram", str(good), "--mode", "test", "--server", svc.url, token=svc.tokens["bob"])
    time.sleep(6)  # submit prints progress lines while no worker is connected (and while one starts)
    worker = svc.start_worker("presence-cpu", "--heartbeat-interval", "0.5")
    out, err = submit.communicate(timeout=300)
    assert submit.returncode == 0, out[-2000:] + err[-2000:]
    progress = [line for line in err.splitlines() if line.startswith("submission ")]
    waiting = [line for line in progress if "waiting for a worker; none connected" in line]
    assert len(waiting) >= 2, err  # at once, then every 5 s while nothing changed
    assert any("running" in line or "done" in line for line in progress[len(waiting):]), err
    assert "passed" in out.splitlines()[-1]

    with svc.client(ADMIN_TOKEN) as admin:
        workers = admin.get("/api/workers").json()
        assert [(w["name"], w["gpu_types"], w["connected"]) for w in workers] == [("presence-cpu", [], True)]
        assert httpx.get(f"{svc.url}/api/health").json()["workers"] == {"connected": 1, "gpu_types": []}
        # A CPU worker runs test jobs only: a benchmark still has no worker to go to.
        assert _submit(svc, "bob", mode="benchmark").status_code == 409
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        assert admin.get("/api/workers").json() == []  # a worker that ends cleanly leaves the table
