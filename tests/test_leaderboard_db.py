"""The leaderboard's database layer on real SQLite and Postgres: migrations match the models, seeding, atomic
claims under contention, re-claims after a missed heartbeat, one completion per job, secret-run flags, ranking."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, select, update

from leaderboard_support import db_url, postgres_server, schema_at  # noqa: F401 - fixtures
from swizzlelab.leaderboard import auth, presence, queue, service
from swizzlelab.leaderboard.api import RequestLimiter
from swizzlelab.leaderboard.auth import authenticate, create_user, hash_token
from swizzlelab.leaderboard.db import (
    ApiToken,
    Base,
    Job,
    JobStatus,
    Leaderboard,
    Run,
    Submission,
    WebSession,
    WorkerPresence,
    open_database,
)
from swizzlelab.leaderboard.db.models import utcnow
from swizzlelab.leaderboard.errors import Conflict, RateLimited, TooLarge, Unauthorized
from swizzlelab.leaderboard.outcome import Outcome
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.ranking import ranking
from swizzlelab.leaderboard.settings import Settings


def _outcome(passed: bool, score: float | None, reason: str = "") -> Outcome:
    now = utcnow()
    return Outcome(passed=passed, score_ms=score, reason=reason, report_text="report\n", result={"k": 1},
                   stdout_tail="", stderr_tail="", system={"gpu": "test-gpu"}, gpu="test-gpu", started_at=now,
                   ended_at=now, duration_s=0.0)


@pytest.fixture
def fresh(db_url):  # noqa: F811
    settings = Settings(db_url=db_url, gpu_types=("H100", "H200"), heartbeat_interval_s=0.2, heartbeat_timeout_s=1.0)
    db = open_database(db_url)
    service.seed_fresh_database(db, settings)
    yield db, settings
    db.dispose()


def _user(db, name: str) -> int:
    with db.write() as session:
        user, _ = create_user(session, name)
        return user.id


def _submit(db, settings, user_id: int, mode: str = "ranked", code: str = "def custom_kernel(d):\n    return d\n") -> int:
    with db.write() as session:
        return service.create_submission(session, settings, user_id, "histogram", "H100", mode, code, "k.py").id


def test_migrations_match_models_and_seed_is_once(fresh):
    db, settings = fresh
    with db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata) == []
    with db.read() as session:
        names = session.scalars(select(Leaderboard.name)).all()
    assert "histogram-H100" in names and "matmul-H200" in names and len(names) == 12
    assert service.seed_fresh_database(db, settings) == 0  # not a fresh database any more
    reopened = open_database(db.url)  # upgrading an up-to-date schema is a no-op
    reopened.dispose()


def test_tokens_hashed_at_rest_and_checked(fresh):
    db, settings = fresh
    with db.write() as session:
        user, token = create_user(session, "alice")
    with db.read() as session:
        stored = session.scalars(select(ApiToken.token_sha256)).all()
        assert token not in stored and hash_token(token) in stored
        assert authenticate(session, token, None).name == "alice"
        with pytest.raises(Unauthorized):
            authenticate(session, token + "x", None)
        assert authenticate(session, "adm", "adm").is_admin


def test_code_stored_once_and_limits(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    first, second = _submit(db, settings, uid, "test"), _submit(db, settings, uid, "test")
    with db.read() as session:
        a, b = session.get(Submission, first), session.get(Submission, second)
        assert a.code_id == b.code_id
    with db.write() as session, pytest.raises(TooLarge):
        service.create_submission(session, settings, uid, "histogram", "H100", "test", "x" * (settings.max_code_bytes + 1), "k.py")
    with db.write() as session:
        board = service.find_leaderboard(session, "histogram", "H100")
        service.set_rate_limit(session, board, "test", 3, 3600)
    _submit(db, settings, uid, "test")
    with db.write() as session, pytest.raises(RateLimited) as err:
        service.create_submission(session, settings, uid, "histogram", "H100", "test", "y = 1\n", "k.py")
    assert 3500 < err.value.retry_after_s <= 3601


def test_request_limiter_window():
    limiter = RequestLimiter(per_minute=3)
    assert [limiter.check("k") for _ in range(3)] == [None, None, None]
    assert 1 <= limiter.check("k") <= 60
    assert limiter.check("other") is None


def test_claims_are_exclusive_under_contention(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    ids = [_submit(db, settings, uid, "test", code=f"v = {i}\n") for i in range(24)]
    claimed: list[int] = []
    lock = threading.Lock()

    def grab(name: str) -> None:
        caps = WorkerCaps(worker_id=name, gpu_type=None)
        while (spec := queue.claim(db, caps, settings)) is not None:
            with lock:
                claimed.append(spec.job_id)

    threads = [threading.Thread(target=grab, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == len(ids)


def test_gpu_less_worker_takes_only_test_jobs(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    _submit(db, settings, uid, "ranked")
    assert queue.claim(db, WorkerCaps("cpu", None), settings) is None
    assert queue.claim(db, WorkerCaps("h200", "H200"), settings) is None
    spec = queue.claim(db, WorkerCaps("h100", "H100"), settings)
    assert spec is not None and spec.mode == "ranked"


def test_expired_heartbeat_reclaim_and_single_completion(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    sub_id = _submit(db, settings, uid, "test")
    first = queue.claim(db, WorkerCaps("a", None), settings)
    assert first is not None and queue.heartbeat(db, first)
    assert queue.claim(db, WorkerCaps("b", None), settings) is None  # still held
    with db.write() as session:  # worker a falls silent
        session.execute(update(Job).values(heartbeat_at=utcnow() - dt.timedelta(seconds=5)))
    second = queue.claim(db, WorkerCaps("b", None), settings)
    assert second is not None and second.job_id == first.job_id and second.attempt == 2
    assert not queue.heartbeat(db, first)
    assert queue.complete(db, second, _outcome(True, None), "b", settings)
    assert not queue.complete(db, first, _outcome(False, None, "late"), "a", settings)  # the stale claim
    assert not queue.complete(db, second, _outcome(True, None), "b", settings)
    with db.read() as session:
        runs = session.scalars(select(Run).where(Run.submission_id == sub_id)).all()
        sub = session.get(Submission, sub_id)
        assert [(r.worker, r.passed) for r in runs] == [("b", True)]
        assert sub.status == "done" and sub.passed is True


def test_a_job_that_kills_its_worker_twice_gets_a_verdict(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    sub_id = _submit(db, settings, uid, "test")
    first = queue.claim(db, WorkerCaps("a", None), settings)
    assert first is not None
    assert queue.worker_lost(db, "a") == [first.job_id]  # a supervisor saw worker a die: claimable at once
    second = queue.claim(db, WorkerCaps("b", None), settings)
    assert second is not None and second.job_id == first.job_id and second.attempt == 2
    with db.write() as session:  # worker b dies too, unsupervised: its heartbeat just stops
        session.execute(update(Job).values(heartbeat_at=utcnow() - dt.timedelta(seconds=5)))
    assert queue.claim(db, WorkerCaps("c", None), settings) is None  # judged, not run a third time
    with db.read() as session:
        sub = session.get(Submission, sub_id)
        runs = session.scalars(select(Run).where(Run.submission_id == sub_id)).all()
        assert sub.status == "done" and sub.passed is False and sub.jobs[0].attempts == 2
        assert len(runs) == 1 and not runs[0].passed and "killed its evaluator" in runs[0].reason
        assert "service failure" not in runs[0].reason
    assert not queue.complete(db, second, _outcome(True, None), "b", settings)  # the dead claim never completes it


def test_jobs_given_up_after_max_service_failures(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    sub_id = _submit(db, settings, uid, "test")
    for _ in range(settings.max_attempts):
        spec = queue.claim(db, WorkerCaps("a", None), settings)
        assert spec is not None
        queue.release(db, spec, "OSError: the database vanished", settings)
    assert queue.claim(db, WorkerCaps("a", None), settings) is None
    with db.read() as session:
        sub = session.get(Submission, sub_id)
        assert sub.status == "error" and "failed 3 times" in sub.error and sub.jobs[0].status == JobStatus.ERROR
        assert "service failure" in sub.error


def _finish_ranked(db, settings, uid: int, public: float, secret: float | None, secret_passed: bool = True,
                   pair: bool = False) -> int:
    """Public and secret jobs claimed apart (a secret job re-claimed alone), or as one paired claim."""
    sub_id = _submit(db, settings, uid, "ranked", code=f"# {uid} {public} {secret}\n")
    caps = WorkerCaps("g", "H100")
    for _ in range(1 if pair else 2):
        spec = queue.claim(db, caps, settings, pair=pair)
        assert spec is not None and spec.submission_id == sub_id and (spec.paired is not None) == pair
        outcome = _outcome(secret_passed, secret) if spec.secret else _outcome(True, public)
        if pair:
            assert spec.paired.secret and spec.paired.secret_seed is not None and spec.paired.job_id != spec.job_id
            outcome.paired = _outcome(secret_passed, secret)
        assert (spec.secret_seed is not None) == spec.secret
        assert queue.complete(db, spec, outcome, "g", settings)
    assert queue.claim(db, caps, settings) is None
    return sub_id


def test_secret_runs_flag_and_ranking(fresh):
    db, settings = fresh
    alice, bob, carol, dave = (_user(db, n) for n in ("alice", "bob", "carol", "dave"))
    _finish_ranked(db, settings, alice, 2.0, 2.05)
    best_alice = _finish_ranked(db, settings, alice, 1.5, 1.52)
    _finish_ranked(db, settings, bob, 1.5, 1.49)  # same score as alice's best, submitted later
    cheat = _finish_ranked(db, settings, carol, 0.5, 1.6, pair=True)  # fast on public inputs only
    broken = _finish_ranked(db, settings, dave, 0.4, None, secret_passed=False, pair=True)
    with db.read() as session:
        assert session.get(Submission, cheat).flagged and "apart" in session.get(Submission, cheat).flag_reason
        assert session.get(Submission, broken).flagged and "failed" in session.get(Submission, broken).flag_reason
        board = service.find_leaderboard(session, "histogram", "H100")
        rows = ranking(session, board)
        assert session.scalar(select(func.count(Run.id))) == 10
    assert [(r.rank, r.user, r.score_ms) for r in rows] == [(1, "alice", 1.5), (2, "bob", 1.5)]
    assert rows[0].submission_id == best_alice


def test_a_paired_claim_dies_whole_and_is_re_claimed_whole(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    sub_id = _submit(db, settings, uid, "ranked")
    first = queue.claim(db, WorkerCaps("a", "H100"), settings)
    assert first is not None and first.paired is not None and queue.heartbeat(db, first)
    assert queue.claim(db, WorkerCaps("b", "H100"), settings) is None  # both held
    assert sorted(queue.worker_lost(db, "a")) == [first.job_id, first.paired.job_id]
    second = queue.claim(db, WorkerCaps("b", "H100"), settings)
    assert second is not None and second.paired is not None and second.attempt == second.paired.attempt == 2
    assert not queue.heartbeat(db, first)
    outcome = _outcome(True, 1.0)
    outcome.paired = _outcome(True, 1.01)
    assert not queue.complete(db, first, outcome, "a", settings)  # the dead claim writes nothing
    assert queue.complete(db, second, outcome, "b", settings)
    with db.read() as session:
        runs = session.scalars(select(Run).where(Run.submission_id == sub_id)).all()
        sub = session.get(Submission, sub_id)
        assert sorted((r.secret, r.worker, r.score_ms) for r in runs) == [(False, "b", 1.0), (True, "b", 1.01)]
        assert sub.status == "done" and sub.passed and not sub.flagged


def test_a_secret_job_held_by_a_live_worker_is_not_paired(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    _submit(db, settings, uid, "ranked")
    alone = queue.claim(db, WorkerCaps("a", "H100"), settings, pair=False)
    assert alone is not None and not alone.secret and alone.paired is None
    secret = queue.claim(db, WorkerCaps("b", "H100"), settings)
    assert secret is not None and secret.secret and secret.paired is None
    with db.write() as session:  # worker a falls silent; b's claim on the secret job is alive
        session.execute(update(Job).where(Job.id == alone.job_id).values(heartbeat_at=utcnow() - dt.timedelta(seconds=5)))
    again = queue.claim(db, WorkerCaps("c", "H100"), settings)
    assert again is not None and again.job_id == alone.job_id and again.paired is None


def test_profile_files_size_limited_and_stored(fresh, tmp_path):
    from swizzlelab.harness.isolate import IsolatedRun
    from swizzlelab.leaderboard.db import ProfileFile
    from swizzlelab.leaderboard.execute import outcome_from_run

    db, settings = fresh
    uid = _user(db, "alice")
    sub_id = _submit(db, settings, uid, "test")
    small, big = tmp_path / "case0.ncu-rep", tmp_path / "case1.ncu-rep"
    small.write_bytes(b"\x01" * 100)
    big.write_bytes(b"\x02" * 5000)
    kernels = [{"name": "histogram_kernel", "metrics": {"dram__bytes_read.sum": 1.0}}]
    run = IsolatedRun(mode="profile", passed=True, score_ms=None, reason=None, report_text="## Profiling\n",
                      report={"profiles": [{"case": {"seed": 11}, "kernels": kernels, "check": {"passed": True}}]},
                      stdout_tail="", stderr_tail="", system={"gpu": "NVIDIA H100 80GB HBM3", "runtime": "CUDA"},
                      profile_files=[small, big], duration_s=1.0, verdicts=[])
    outcome = outcome_from_run(run, utcnow(), max_profile_bytes=1000)
    assert [name for name, _ in outcome.profile_files] == ["case0.ncu-rep"]
    assert "case1.ncu-rep is 5000 bytes" in outcome.notes[0]
    spec = queue.claim(db, WorkerCaps("w", None), settings)
    assert spec is not None and spec.submission_id == sub_id
    assert queue.complete(db, spec, outcome, "w", settings)
    with db.read() as session:
        stored = session.scalars(select(ProfileFile)).all()
        assert [(f.name, f.size_bytes, f.content) for f in stored] == [("case0.ncu-rep", 100, b"\x01" * 100)]
        row = session.scalars(select(Run)).one()
        assert row.profile[0]["kernels"] == kernels and row.gpu == "NVIDIA H100 80GB HBM3"
        assert "over the 1000-byte limit" in session.get(Job, spec.job_id).error


def test_a_new_sqlite_database_gets_a_private_folder(tmp_path) -> None:
    database = open_database(str(tmp_path / "fresh" / "leaderboard.db"))
    try:
        assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
    finally:
        database.dispose()


def test_cancel_only_while_every_job_is_queued(fresh):
    db, settings = fresh
    uid = _user(db, "alice")
    first, second = _submit(db, settings, uid, "ranked"), _submit(db, settings, uid, "ranked", code="v = 2\n")
    with db.write() as session:
        assert service.cancel_submission(session, session.get(Submission, first)).status == "cancelled"
    with db.read() as session:
        assert {j.status for j in session.get(Submission, first).jobs} == {JobStatus.CANCELLED}
    spec = queue.claim(db, WorkerCaps("h100", "H100"), settings)  # cancelled jobs are never claimed
    assert spec is not None and spec.submission_id == second and not spec.secret
    assert spec.paired is not None and spec.paired.secret  # the secret job comes with it
    with db.write() as session, pytest.raises(Conflict, match="running already"):
        service.cancel_submission(session, session.get(Submission, second))
    with db.read() as session:  # the refused cancel changed nothing
        sub = session.get(Submission, second)
        assert sub.status == "running" and [j.status for j in sub.jobs] == [JobStatus.RUNNING, JobStatus.RUNNING]
    with db.write() as session, pytest.raises(Conflict, match="cancelled already"):
        service.cancel_submission(session, session.get(Submission, first))


def test_workers_announce_refresh_and_leave(fresh):
    db, settings = fresh
    with db.read() as session:
        assert presence.refusal(session, settings, "ranked", "H100").startswith("no H100 worker connected")
        assert presence.refusal(session, settings, "test", "H100") is None  # taken, shown as waiting
    caps = WorkerCaps("gpu-1", "H100")
    with presence.announced(db, caps, settings):
        with db.read() as session:
            assert presence.refusal(session, settings, "ranked", "H100") is None
            assert presence.refusal(session, settings, "benchmark", "H200") is not None
            first_seen = presence.worker_views(session, settings)[0]["last_seen_at"]
        time.sleep(3 * settings.heartbeat_interval_s)
        with db.read() as session:
            view = presence.worker_views(session, settings)[0]
            assert view["last_seen_at"] > first_seen and view["gpu_types"] == ["H100"] and view["connected"]
    with db.read() as session:
        assert presence.worker_views(session, settings) == []
    presence.announce(db, WorkerCaps("silent", None))  # a worker killed without leaving ages out
    with db.write() as session:
        session.execute(update(WorkerPresence).values(last_seen_at=utcnow() - dt.timedelta(seconds=5)))
    with db.read() as session:
        assert presence.connected(session, settings).count == 0


def test_web_sessions_end_with_their_token_or_user(fresh):
    db, settings = fresh
    with db.write() as session:
        user, token = create_user(session, "alice")
        cookie, who = auth.start_web_session(session, token, None)
        admin_cookie, _ = auth.start_web_session(session, "adm", "adm")
    with db.read() as session:
        assert who.name == "alice" and auth.web_session_principal(session, cookie, None).name == "alice"
        assert cookie not in session.scalars(select(WebSession.secret_sha256)).all()  # only its hash is kept
        assert auth.web_session_principal(session, admin_cookie, "adm").is_admin
        assert auth.web_session_principal(session, admin_cookie, "another-admin-token") is None
        assert auth.web_session_principal(session, cookie + "x", None) is None
    with db.write() as session:
        auth.revoke_user(session, "alice")
    with db.read() as session:
        assert auth.web_session_principal(session, cookie, None) is None
    with db.write() as session, pytest.raises(Unauthorized):
        auth.start_web_session(session, token, None)


def test_migration_0002_upgrades_a_0001_database_with_rows(db_url):  # noqa: F811
    schema_at(db_url, "0001",
              "INSERT INTO leaderboards (name, task, gpu_type, description, secret_seed, ranking_rule, visible, "
              "created_at) VALUES ('histogram-H100', 'histogram', 'H100', '', 7, 'geometric_mean', true, "
              "'2026-11-01 00:00:00')")
    db = open_database(db_url)
    try:
        with db.read() as session:
            board = session.scalars(select(Leaderboard)).one()
            assert board.publish_code is False and board.secret_seed == 7
    finally:
        db.dispose()
