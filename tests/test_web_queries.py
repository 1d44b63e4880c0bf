"""The web pages' queries against the service's ranking, on a real SQLite file: the one-query ranking of every
leaderboard (index, user pages) must give the rows ranking.ranking gives, flagged runs, banned users and ties
included; ± and best/worst come from the stored result; the user page and the index agree with both.
"""

from __future__ import annotations

import datetime as dt
import math
import random

from sqlalchemy import select

from swizzlelab.leaderboard.db import Job, JobStatus, Leaderboard, Run, Submission, SubmissionStatus, User
from swizzlelab.leaderboard.db import open_database
from swizzlelab.leaderboard.ranking import ranking
from swizzlelab.leaderboard.service import seed_fresh_database, store_code
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.leaderboard.web import queries


def _result(cases: list[tuple[float, float, float, float]]) -> dict:
    """A ranked report with the given (mean, std, best, worst) per case; score = geometric mean of the means."""
    rows = [{"case": {"seed": i}, "seed": i, "check": {"passed": True, "message": "ok"},
             "candidate": {"mean_ms": m, "std_ms": s, "best_ms": b, "worst_ms": w, "n": 10, "samples_ms": [m] * 10}}
            for i, (m, s, b, w) in enumerate(cases)]
    score = math.exp(sum(math.log(c[0]) for c in cases) / len(cases))
    return {"ranked": {"cases": rows, "score_ms": score}, "system": {"gpu": "NVIDIA H100 80GB HBM3"}}


def _fill(db, rng: random.Random) -> None:
    at0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    with db.write() as session:
        boards = session.scalars(select(Leaderboard).order_by(Leaderboard.id)).all()
        users = [User(name=f"u{i}", banned=(i == 3)) for i in range(8)]
        session.add_all(users)
        session.flush()
        code = store_code(session, "def custom_kernel(data):\n    return data\n")
        for n in range(300):
            board, user = rng.choice(boards[:3]), rng.choice(users)
            mode = rng.choice(["ranked", "ranked", "ranked", "test"])
            score = round(rng.uniform(1.0, 3.0), 1)  # coarse, so that equal scores (ties) occur
            at = at0 + dt.timedelta(minutes=rng.randrange(0, 50))  # equal times occur too
            passed, flagged = rng.random() > 0.2, rng.random() < 0.1
            result = _result([(score, 0.01 * score, 0.99 * score, 1.02 * score)])
            sub = Submission(user_id=user.id, leaderboard_id=board.id, code=code, filename="k.py", mode=mode,
                             created_at=at, status=SubmissionStatus.DONE, passed=passed, flagged=flagged,
                             score_ms=score if mode == "ranked" else None)
            session.add(sub)
            session.flush()
            for secret in (False, True) if mode == "ranked" else (False,):
                job = Job(submission_id=sub.id, mode=mode, secret=secret, gpu_type=board.gpu_type,
                          status=JobStatus.DONE)
                session.add(job)
                session.flush()
                session.add(Run(submission_id=sub.id, job_id=job.id, mode=mode, secret=secret, worker="w", gpu="g",
                                started_at=at, ended_at=at, duration_s=1.0, passed=passed,
                                score_ms=score if mode == "ranked" else None, result=result))


def test_one_query_ranking_matches_the_service_ranking(tmp_path):
    db = open_database(f"sqlite:///{tmp_path / 'lb.db'}")
    seed_fresh_database(db, Settings(db_url=db.url))
    _fill(db, random.Random(5))
    with db.read() as session:
        all_ranks = queries.board_ranks(session)
        checked = 0
        for board in session.scalars(select(Leaderboard)).all():
            expected = [(r.rank, r.user, r.submission_id, r.score_ms) for r in ranking(session, board)]
            mine = [(r.rank, r.user, r.submission_id, r.score_ms) for r in all_ranks if r.leaderboard_id == board.id]
            one = [(r.rank, r.user, r.submission_id, r.score_ms) for r in queries.board_ranks(session, board.id)]
            assert mine == expected == one, board.name
            checked += len(expected)
            page = queries.ranked_rows(session, board)
            assert [(r.rank, r.user, r.submission_id) for r in page] == [e[:3] for e in expected]
        assert checked >= 10
        assert "u3" not in {r.user for r in all_ranks}  # banned


def test_plus_minus_best_and_worst_combine_cases_like_the_score(tmp_path):
    db = open_database(f"sqlite:///{tmp_path / 'lb.db'}")
    seed_fresh_database(db, Settings(db_url=db.url))
    cases = [(2.0, 0.02, 1.9, 2.2), (8.0, 0.4, 7.5, 9.0), (1.0, 0.0, 1.0, 1.0)]
    result = _result(cases)
    at = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    with db.write() as session:
        board = session.scalar(select(Leaderboard).where(Leaderboard.task == "matmul", Leaderboard.gpu_type == "H100"))
        user = User(name="solo")
        session.add(user)
        session.flush()
        sub = Submission(user_id=user.id, leaderboard_id=board.id, code=store_code(session, "x = 1\n"),
                         filename="k.py", mode="ranked", created_at=at, status=SubmissionStatus.DONE, passed=True,
                         score_ms=result["ranked"]["score_ms"])
        session.add(sub)
        session.flush()
        for secret in (False, True):
            job = Job(submission_id=sub.id, mode="ranked", secret=secret, gpu_type="H100", status=JobStatus.DONE)
            session.add(job)
            session.flush()
            session.add(Run(submission_id=sub.id, job_id=job.id, mode="ranked", secret=secret, worker="w", gpu="g",
                            started_at=at, ended_at=at, duration_s=1.0, passed=True,
                            score_ms=result["ranked"]["score_ms"], result=result))
    with db.read() as session:
        board = session.scalar(select(Leaderboard).where(Leaderboard.task == "matmul", Leaderboard.gpu_type == "H100"))
        (row,) = queries.ranked_rows(session, board)
        score = (2.0 * 8.0 * 1.0) ** (1 / 3)
        assert math.isclose(row.score_ms, score)
        assert math.isclose(row.std_ms, score * math.sqrt(0.01 ** 2 + 0.05 ** 2) / 3)
        assert math.isclose(row.best_ms, (1.9 * 7.5 * 1.0) ** (1 / 3))
        assert math.isclose(row.worst_ms, (2.2 * 9.0 * 1.0) ** (1 / 3))
        (top,) = [r for r in queries.index_rows(session) if r.task == "matmul" and r.gpu == "H100"]
        assert (top.top_user, top.entrants) == ("solo", 1) and math.isclose(top.top_score_ms, score)
        view = queries.user_view(session, "solo")
        assert [(b.task, b.gpu, b.rank) for b in view.best] == [("matmul", "H100", 1)]
