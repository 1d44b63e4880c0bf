"""Issue 57, the service under a hostile user, round three, on SQLite and Postgres alike: text a submission printed
or raised (NUL bytes, lone surrogates) is stored, ids past the columns' range are "not found", user names are one
per name whatever the case and reserved names are refused, a banned user's queued jobs are cancelled, a GPU worker
serve started makes submissions wait; and against a real `swizzlelab serve`: those routes on each database, the
shared request limit of /login, security headers, and the CLI printing escape sequences as text.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys

import httpx
import pytest
from sqlalchemy import select

from leaderboard_support import (  # noqa: F401 - fixtures
    ADMIN_TOKEN,
    child_env,
    db_url,
    postgres_server,
    schema_at,
    start_service,
    swizzlelab,
    wait_for,
)
from swizzlelab.leaderboard import auth, presence, queue, service
from swizzlelab.leaderboard.auth import create_user
from swizzlelab.leaderboard.db import Job, Run, Submission, open_database
from swizzlelab.leaderboard.db.models import JobStatus, User, in_id_range, storable
from swizzlelab.leaderboard.errors import BadRequest, Conflict, NotFound
from swizzlelab.leaderboard.outcome import Outcome
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.leaderboard.supervisor import Slot, Supervisor

# What a kernel may print or raise: NUL (Postgres text refuses it), a lone surrogate (no UTF-8), escapes.
HOSTILE = "boom\x00\x1b]52;c;cHduZWQ=\x07\x1b[2J\udc80 end"


@pytest.fixture
def fresh(db_url):  # noqa: F811
    settings = Settings(db_url=db_url, gpu_types=("H100",), heartbeat_interval_s=0.2, heartbeat_timeout_s=1.0)
    db = open_database(db_url)
    service.seed_fresh_database(db, settings)
    yield db, settings
    db.dispose()


def _submission(db, settings, name: str, mode: str = "test") -> tuple[int, int]:
    with db.write() as session:
        user, _ = create_user(session, name)
        sub = service.create_submission(session, settings, user.id, "histogram", "H100", mode,
                                        "def custom_kernel(d):\n    return d\n", "k.py")
        return user.id, sub.id


def test_a_run_that_printed_nul_bytes_is_stored(fresh):
    db, settings = fresh
    _, sub_id = _submission(db, settings, "mallory")
    spec = queue.claim(db, WorkerCaps("cpu-1", None), settings)
    assert spec is not None and spec.submission_id == sub_id
    now = dt.datetime.now(dt.timezone.utc)
    outcome = Outcome(passed=False, score_ms=None, reason=HOSTILE, report_text=f"> Testing failed\n{HOSTILE}\n",
                      result={"reason": HOSTILE, "cases": [{HOSTILE: [HOSTILE]}]}, stdout_tail=HOSTILE,
                      stderr_tail=HOSTILE, system={"gpu": "none"}, gpu="none", started_at=now, ended_at=now,
                      duration_s=0.1, notes=[HOSTILE])
    assert queue.complete(db, spec, outcome, "cpu-1", settings)
    with db.read() as session:
        run = session.scalar(select(Run).where(Run.submission_id == sub_id))
        expected = storable(HOSTILE)
        assert "\x00" not in expected and "\ufffd" in expected and "\x1b]52" in expected  # only NUL and the surrogate go
        assert run.reason == run.stdout_tail == run.stderr_tail == expected
        assert run.result == {"reason": expected, "cases": [{expected: [expected]}]}
        assert session.get(Job, spec.job_id).error == expected
        assert session.get(Submission, sub_id).status == "done"


def test_ids_past_the_columns_range_are_not_found(fresh):
    db, settings = fresh
    _submission(db, settings, "alice")
    with db.read() as session:
        biggest = 2**63 - 1 if db.is_sqlite else 2**31 - 1
        for number in (biggest + 1, 2**63, 2**70, 0, -1):
            assert not in_id_range(number, session)
            with pytest.raises(NotFound):
                service.get_submission(session, number, None, True)
            with pytest.raises(NotFound):
                service.get_run(session, number, None, True)
            with pytest.raises(NotFound):
                auth.revoke_token(session, number)
        assert in_id_range(biggest, session)
        assert session.get(Submission, biggest) is None  # the largest id the column holds: asked, no row, no error


def test_user_names_are_one_per_name_whatever_the_case(fresh):
    db, _ = fresh
    with db.write() as session:
        create_user(session, "Alice")
    for name in ("alice", "ALICE", "aLiCe"):
        with db.write() as session, pytest.raises(Conflict, match="differs only in case"):
            create_user(session, name)
    for name in ("admin", "ADMIN", "Root", "swizzlelab"):
        with db.write() as session, pytest.raises(BadRequest, match="reserved"):
            create_user(session, name)
    with db.read() as session:
        assert session.scalars(select(User.name)).all() == ["Alice"]
        assert auth.find_user(session, "alice").name == "Alice"  # the admin's commands find it in any case


def test_migration_0004_keys_names_that_differ_only_in_case(db_url):  # noqa: F811
    schema_at(db_url, "0003", *(f"INSERT INTO users (name, is_admin, banned, created_at) VALUES ('{name}', false, "
                                "false, '2026-11-01 00:00:00')" for name in ("alice", "Alice", "bob")))
    db = open_database(db_url)
    try:
        with db.read() as session:
            keys = dict(session.execute(select(User.name, User.name_key)).all())
        assert keys == {"alice": "alice", "Alice": f"alice#{2}", "bob": "bob"}
        with db.write() as session, pytest.raises(Conflict):
            create_user(session, "ALICE")
    finally:
        db.dispose()


def test_banning_a_user_cancels_their_queued_jobs(fresh):
    db, settings = fresh
    uid, queued = _submission(db, settings, "mallory", mode="ranked")
    with db.write() as session:
        running = service.create_submission(session, settings, uid, "histogram", "H100", "test",
                                            "def custom_kernel(d):\n    return d + 0\n", "k2.py").id
    spec = queue.claim(db, WorkerCaps("cpu-1", None), settings)  # a CPU worker takes the test job only
    assert spec is not None and spec.submission_id == running
    with db.write() as session:
        done = auth.revoke_user(session, "mallory")
    assert done["jobs_cancelled"] == 2 and done["banned"]
    with db.read() as session:
        sub = session.get(Submission, queued)
        assert sub.status == "cancelled" and {j.status for j in sub.jobs} == {JobStatus.CANCELLED}
        assert "banned" in sub.error
        assert session.get(Submission, running).status == "running"  # a claimed job finishes
    assert queue.claim(db, WorkerCaps("h100", "H100"), settings) is None  # nothing of theirs runs any more


# ---------------------------------------------------------------- a real server on each database

ROUTES = ("/api/submissions/{n}", "/api/runs/{n}", "/api/runs/1/files/{n}", "/api/submissions/{n}/code",
          "/api/submissions/{n}/suggestion", "/submissions/{n}", "/submissions/{n}/code.py")


def test_the_server_answers_out_of_range_ids_and_names_on_each_database(db_url, tmp_path):  # noqa: F811
    svc = start_service(db_url, tmp_path, "--workers", "0", "--requests-per-minute", "100000")
    try:
        with svc.client(ADMIN_TOKEN) as admin:
            token = admin.post("/api/users", json={"name": "Alice"}).json()["token"]
            assert admin.post("/api/users", json={"name": "alice"}).status_code == 409
            refused = admin.post("/api/users", json={"name": "ADMIN"})
            assert refused.status_code == 400 and "reserved" in refused.json()["detail"]
            for n in (2**31, 2**31 + 7, 2**63 - 1, 2**63):
                for path in ROUTES:
                    answer = admin.get(path.format(n=n))
                    assert answer.status_code == 404, (path.format(n=n), answer.status_code, answer.text[:200])
                assert admin.post(f"/api/submissions/{n}/cancel").status_code == 404
                assert admin.post(f"/api/tokens/{n}/revoke").status_code == 404
            with svc.client(token) as alice:
                assert alice.get("/api/me").json() == {"name": "Alice", "admin": False}
    finally:
        svc.stop()


def test_login_shares_the_request_limit_and_pages_send_security_headers(tmp_path):
    svc = start_service(f"sqlite:///{tmp_path / 'lb.db'}", tmp_path, "--workers", "0", "--requests-per-minute", "12")
    try:
        with httpx.Client(base_url=svc.url) as browser:
            form = browser.get("/login")
            for header, word in (("content-security-policy", "default-src 'self'"), ("x-frame-options", "DENY"),
                                 ("x-content-type-options", "nosniff")):
                assert word in form.headers.get(header, ""), (header, form.headers)
            assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
            csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', form.text).group(1)
            codes = [browser.post("/login", data={"csrf_token": csrf, "token": f"bogus-{i}", "next_url": "/"}).status_code
                     for i in range(14)]
        # Bogus tokens typed into the login form count for the address, with the API's requests.
        first = codes.index(429)
        assert set(codes[:first]) == {401} and set(codes[first:]) == {429} and first <= 12
        blocked = httpx.get(f"{svc.url}/api/me", headers={"Authorization": "Bearer bogus"})
        assert blocked.status_code == 429 and "x-frame-options" in blocked.headers
    finally:
        svc.stop()


def _finish_with(db, settings, sub_id: int, text: str) -> None:
    """Complete the submission's job as a worker would, with a run whose every text is `text`."""
    spec = queue.claim(db, WorkerCaps("cpu-1", None), settings)
    assert spec is not None and spec.submission_id == sub_id
    now = dt.datetime.now(dt.timezone.utc)
    outcome = Outcome(passed=False, score_ms=None, reason=text, report_text=f"> Testing failed\n{text}\n",
                      result={"reason": text}, stdout_tail=text, stderr_tail=text, system={"gpu": "none"},
                      gpu="none", started_at=now, ended_at=now, duration_s=0.1)
    assert queue.complete(db, spec, outcome, "cpu-1", settings)


def test_the_cli_shows_escape_sequences_instead_of_sending_them(tmp_path):
    db_file = tmp_path / "lb.db"
    svc = start_service(f"sqlite:///{db_file}", tmp_path, "--workers", "0")
    db = open_database(f"sqlite:///{db_file}")
    settings = Settings(db_url=f"sqlite:///{db_file}", heartbeat_interval_s=0.2, heartbeat_timeout_s=1.0)
    kernel = tmp_path / "kernel.py"
    kernel.write_text("def custom_kernel(data):\n    raise RuntimeError('\\x1b]52;c;cHduZWQ=\\x07')\n")
    try:
        with svc.client(ADMIN_TOKEN) as admin:
            token = admin.post("/api/users", json={"name": "mallory"}).json()["token"]
        env = child_env(SWIZZLELAB_TOKEN=token, SWIZZLELAB_SERVER=svc.url)
        waiting = subprocess.Popen([sys.executable, "-m", "swizzlelab.cli", "submit", "histogram", str(kernel),
                                    "--suggestion-wait", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=env)
        with svc.client(token) as api:
            sub_id = wait_for(lambda: (api.get("/api/submissions").json() or [{}])[0].get("id"), 60, "the submission")
        _finish_with(db, settings, sub_id, HOSTILE)
        out, err = waiting.communicate(timeout=120)
        shown = swizzlelab("submission", "show", str(sub_id), env=env)
        for printed, code in ((out + err, waiting.returncode), ((shown.stdout + shown.stderr).encode(), shown.returncode)):
            assert code == 1
            assert not re.search(rb"[\x00\x07\x1b\x9b]", printed), printed[-400:]  # nothing a terminal would obey
            assert rb"\x1b]52;c;cHduZWQ=\x07\x1b[2J" in printed  # ... and what was there is shown
    finally:
        db.dispose()
        svc.stop()


def test_a_gpu_worker_serve_started_makes_submissions_wait_not_fail(fresh):
    """Until the H100 worker serve started announces itself, a ranked H100 submission is taken (waiting: 'it is
    starting'), not refused with 409; once it has announced and gone, the refusal is back."""
    db, settings = fresh
    supervisor = Supervisor(db, [Slot(0, ["true"], {}, "-gpu0", gpu_type="H100")], say=lambda text: None)
    supervisor.slots[0].worker_id = "serve1-w0.1-gpu0"  # as _spawn names it; the process itself is not needed here
    settings = settings.with_(workers_starting=supervisor.starting_types)
    with db.read() as session:
        assert presence.refusal(session, settings, "ranked", "H100") is None
        assert presence.refusal(session, settings, "ranked", "H200") is not None  # no worker of that type starts
    with db.write() as session:
        user, _ = create_user(session, "alice")
        sub = service.create_submission(session, settings, user.id, "histogram", "H100", "ranked", "x = 1\n", "k.py")
        assert presence.waiting_reason(session, settings, sub) == "waiting for an H100 worker; it is starting"
    presence.announce(db, WorkerCaps("serve1-w0.1-gpu0", "H100"))
    assert supervisor.starting_types() == frozenset()
    presence.leave(db, "serve1-w0.1-gpu0")
    with db.read() as session:
        assert "no H100 worker connected" in presence.refusal(session, settings, "ranked", "H100")
