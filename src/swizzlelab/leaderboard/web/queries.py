"""Read-only queries behind the web pages: index, leaderboard (ranking with ± and best/worst, progress plots),
submission, user. They read the service's models and ranking; nothing here writes to the database.

The privacy rule (service.code_visible): a submission's code, report text, failure reasons, stdout and stderr
are shown to its owner and the admins; everyone else sees its user, times, status, score and timing tables.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from swizzlelab.leaderboard import presence, suggestions
from swizzlelab.leaderboard.auth import Principal
from swizzlelab.leaderboard.db.models import (
    Job,
    JobStatus,
    Leaderboard,
    Run,
    Submission,
    SubmissionStatus,
    User,
    in_id_range,
    utcnow,
)
from swizzlelab.leaderboard.errors import NotFound
from swizzlelab.leaderboard.service import code_visible
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.leaderboard.web.render import lb_url
from swizzlelab.tasks.registry import BUILTIN_DIR, SPEC_FILE

# The public ranked cases a leaderboard's ± and best/worst are read from (the built-in tasks have at most 3).
MAX_RANKED_CASES = 3
TOP_USERS_PLOTTED = 5
USER_PAGE_SUBMISSIONS = 100


def _closed(board: Leaderboard) -> bool:
    return board.deadline is not None and utcnow() > board.deadline


def _ranked_eligible(board_id: int | None) -> list[Any]:
    """The filter of the service's ranking (ranking.py) at the submission level, less its one-row-per-user step;
    all boards for None. A finished submission carries its public run's verdict and score (queue._finalize), so
    the slim submissions table answers this without reading the runs, whose rows hold the large result JSON."""
    board = [] if board_id is None else [Submission.leaderboard_id == board_id]
    return [
        *board,
        Submission.mode == "ranked",
        Submission.status == SubmissionStatus.DONE,
        Submission.passed.is_(True),
        Submission.flagged.is_(False),
        Submission.score_ms.is_not(None),
        User.banned.is_(False),
    ]


@dataclass(frozen=True)
class BoardRank:
    leaderboard_id: int
    rank: int
    user: str
    score_ms: float
    submission_id: int
    submitted_at: dt.datetime
    entrants: int  # users ranked on this board


def board_ranks(
    session: Session, board_id: int | None = None, user_name: str | None = None, top_only: bool = False
) -> list[BoardRank]:
    """The ranking of one leaderboard or of all in one query, best first: the rule of the service's
    ranking.ranking read from the submissions table (ties by submission time, then submission id where the
    service breaks them by run id, in the same creation order); optionally only one user's rows or only each
    board's #1. A test checks it agrees with ranking.ranking."""
    best = (
        select(
            Submission.leaderboard_id, User.name, Submission.score_ms, Submission.id.label("submission_id"),
            Submission.created_at,
            func.row_number().over(
                partition_by=(Submission.leaderboard_id, Submission.user_id),
                order_by=(Submission.score_ms, Submission.created_at, Submission.id),
            ).label("nth"),
        )
        .join(User, Submission.user_id == User.id)
        .where(*_ranked_eligible(board_id))
        .subquery()
    )
    ranked = (
        select(
            best,
            func.row_number().over(
                partition_by=best.c.leaderboard_id,
                order_by=(best.c.score_ms, best.c.created_at, best.c.submission_id),
            ).label("rank"),
            func.count().over(partition_by=best.c.leaderboard_id).label("entrants"),
        )
        .where(best.c.nth == 1)
        .subquery()
    )
    query = select(ranked).order_by(ranked.c.leaderboard_id, ranked.c.rank)
    if user_name is not None:
        query = query.where(ranked.c.name == user_name)
    if top_only:
        query = query.where(ranked.c.rank == 1)
    return [BoardRank(leaderboard_id=r.leaderboard_id, rank=r.rank, user=r.name, score_ms=float(r.score_ms),
                      submission_id=r.submission_id, submitted_at=r.created_at, entrants=r.entrants)
            for r in session.execute(query)]


# ---------------------------------------------------------------- index


@dataclass
class IndexRow:
    task: str
    gpu: str
    url: str
    top_user: str | None
    top_score_ms: float | None
    entrants: int
    deadline: dt.datetime | None
    closed: bool


def index_rows(session: Session) -> list[IndexRow]:
    boards = session.scalars(
        select(Leaderboard).where(Leaderboard.visible.is_(True)).order_by(Leaderboard.task, Leaderboard.gpu_type)
    ).all()
    top = {r.leaderboard_id: r for r in board_ranks(session, top_only=True)}
    rows = []
    for board in boards:
        first = top.get(board.id)
        rows.append(IndexRow(task=board.task, gpu=board.gpu_type, url=lb_url(board.task, board.gpu_type),
                             top_user=first.user if first else None, top_score_ms=first.score_ms if first else None,
                             entrants=first.entrants if first else 0, deadline=board.deadline,
                             closed=_closed(board)))
    return rows


@dataclass
class BoardChoice:
    key: str  # "task/GPU", the submit form's value
    task: str
    gpu: str
    closed: bool


def board_choices(session: Session) -> list[BoardChoice]:
    boards = session.scalars(
        select(Leaderboard).where(Leaderboard.visible.is_(True)).order_by(Leaderboard.task, Leaderboard.gpu_type)
    ).all()
    return [BoardChoice(key=f"{b.task}/{b.gpu_type}", task=b.task, gpu=b.gpu_type, closed=_closed(b)) for b in boards]


# ---------------------------------------------------------------- leaderboard


@dataclass
class RankedRow:
    rank: int
    user: str
    score_ms: float
    std_ms: float | None
    best_ms: float | None
    worst_ms: float | None
    submitted_at: dt.datetime
    submission_id: int
    run_id: int
    other_runs: int


@dataclass
class PlotPoint:
    series: str
    at: dt.datetime
    value: float
    submission_id: int


@dataclass
class Plot:
    id: str
    series_title: str
    spec: dict[str, Any]
    rows: list[PlotPoint]


@dataclass
class BoardView:
    task: str
    gpu: str
    key: str
    gpus: list[str]
    description: str
    benchmarks: list[str]
    deadline: dt.datetime | None
    closed: bool
    ranking_rule: str


def find_board(session: Session, task: str, gpu: str) -> Leaderboard:
    board = session.scalar(select(Leaderboard).where(Leaderboard.task == task, Leaderboard.gpu_type == gpu,
                                                     Leaderboard.visible.is_(True)))
    if board is None:
        raise NotFound(f"no leaderboard for task {task!r} on {gpu!r}")
    return board


@lru_cache(maxsize=64)
def _task_benchmarks(task: str) -> tuple[str, ...]:
    """The benchmark cases of a built-in task, as 'seed: 11; rows: 1048576; channels: 512' (read once: the
    files ship with the package, and parsing YAML costs more than the page's queries)."""
    path = BUILTIN_DIR / task / SPEC_FILE
    if not path.is_file():
        return ()
    spec = yaml.safe_load(path.read_text()) or {}
    return tuple("; ".join(f"{k}: {v}" for k, v in case.items()) for case in spec.get("benchmarks", []))


def board_view(session: Session, board: Leaderboard) -> BoardView:
    gpus = session.scalars(select(Leaderboard.gpu_type).where(Leaderboard.task == board.task,
                                                               Leaderboard.visible.is_(True))
                           .order_by(Leaderboard.gpu_type)).all()
    return BoardView(task=board.task, gpu=board.gpu_type, key=f"{board.task}/{board.gpu_type}", gpus=list(gpus),
                     description=board.description, benchmarks=list(_task_benchmarks(board.task)),
                     deadline=board.deadline, closed=_closed(board), ranking_rule=board.ranking_rule)


# (database, run id) -> (rel_std, best, worst). A run row is written once and never changed (one run per job), so
# what was read from its result stays true for the life of the process.
_STATS_CACHE: dict[tuple[str, int], tuple[float | None, ...]] = {}
_STATS_CACHE_MAX = 200_000


def _case_stats(session: Session, run_ids: list[int], n_cases: int) -> dict[int, tuple[float | None, ...]]:
    """Per run: (rel_std, best, worst) combined over its ranked cases, read from the result JSON in the database
    (json_extract / ->) so the timing samples stored beside them are never loaded; cached per run."""
    database = str(session.get_bind().url)
    known = {run_id: _STATS_CACHE[(database, run_id)] for run_id in run_ids if (database, run_id) in _STATS_CACHE}
    missing = [run_id for run_id in run_ids if run_id not in known]
    if missing:
        fresh = _read_case_stats(session, missing, n_cases)
        if len(_STATS_CACHE) + len(fresh) > _STATS_CACHE_MAX:
            _STATS_CACHE.clear()
        _STATS_CACHE.update({(database, run_id): value for run_id, value in fresh.items()})
        known.update(fresh)
    return known


def _read_case_stats(session: Session, run_ids: list[int], n_cases: int) -> dict[int, tuple[float | None, ...]]:
    names = ("mean_ms", "std_ms", "best_ms", "worst_ms")
    paths = [("ranked", "cases", i, "candidate", name) for i in range(n_cases) for name in names]
    if session.get_bind().dialect.name == "sqlite":
        # One json_extract with every path parses each stored document once (it returns a JSON array).
        texts = ["$." + ".".join(f"[{p}]" if isinstance(p, int) else p for p in path).replace(".[", "[")
                 for path in paths]
        query = select(Run.id, func.json_extract(Run.result, *texts)).where(Run.id.in_(run_ids))
        fetched = [(rid, json.loads(packed) if packed else [None] * len(paths))
                   for rid, packed in session.execute(query)]
    else:
        columns = [Run.result[path].as_float() for path in paths]
        fetched = [(row[0], list(row[1:])) for row in session.execute(select(Run.id, *columns)
                                                                      .where(Run.id.in_(run_ids)))]
    out: dict[int, tuple[float | None, ...]] = {}
    for run_id, values in fetched:
        cases = [values[4 * i: 4 * i + 4] for i in range(n_cases)]
        cases = [c for c in cases if all(v is not None for v in c) and c[0] > 0]
        if not cases:
            out[run_id] = (None, None, None)
            continue
        k = len(cases)
        # The score is the geometric mean of the case means, so its relative spread is the root-sum-square of
        # the cases' relative spreads over k (first-order), and best/worst combine the same way as the score.
        rel_std = math.sqrt(sum((c[1] / c[0]) ** 2 for c in cases)) / k
        best = math.exp(sum(math.log(c[2]) for c in cases) / k) if all(c[2] > 0 for c in cases) else None
        worst = math.exp(sum(math.log(c[3]) for c in cases) / k) if all(c[3] > 0 for c in cases) else None
        out[run_id] = (rel_std, best, worst)
    return out


def ranked_points(session: Session, board_id: int) -> list[Any]:
    """Every rankable submission of one board as (user, submitted_at, score_ms, submission_id), oldest first: the
    one read the leaderboard page's table, counts and plots are all computed from."""
    return list(session.execute(
        select(User.name, Submission.created_at, Submission.score_ms, Submission.id)
        .join(User, Submission.user_id == User.id)
        .where(*_ranked_eligible(board_id)).order_by(Submission.created_at, Submission.id)
    ).all())


def ranked_rows(session: Session, board: Leaderboard, points: list[Any] | None = None) -> list[RankedRow]:
    """The ranked table: each user's best by (score, submission time, submission id), ordered by the same key,
    as board_ranks and the service's ranking order them; plus ± and best/worst of each shown run."""
    points = ranked_points(session, board.id) if points is None else points
    best: dict[str, tuple[float, dt.datetime, int]] = {}
    counts: dict[str, int] = {}
    for name, at, score, sub_id in points:
        key = (float(score), at, sub_id)
        counts[name] = counts.get(name, 0) + 1
        if name not in best or key < best[name]:
            best[name] = key
    ranked = sorted(best.items(), key=lambda item: item[1])
    run_ids = dict(session.execute(
        select(Run.submission_id, Run.id).where(Run.submission_id.in_([key[2] for _, key in ranked]),
                                                Run.secret.is_(False))
    ).all()) if ranked else {}
    n_cases = max(1, min(MAX_RANKED_CASES, len(_task_benchmarks(board.task)) or 1))
    stats = _case_stats(session, list(run_ids.values()), n_cases)
    rows = []
    for rank, (name, (score, at, sub_id)) in enumerate(ranked, start=1):
        run_id = run_ids.get(sub_id, 0)
        rel_std, low, high = stats.get(run_id, (None, None, None))
        rows.append(RankedRow(rank=rank, user=name, score_ms=score,
                              std_ms=None if rel_std is None else rel_std * score, best_ms=low, worst_ms=high,
                              submitted_at=at, submission_id=sub_id, run_id=run_id, other_runs=counts[name] - 1))
    return rows


def _iso(value: dt.datetime) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def progress_plots(
    session: Session, board: Leaderboard, ranked: list[RankedRow], points: list[Any] | None = None
) -> list[Plot]:
    """Two plots: the top users' best time over time (running minimum), and every ranked time."""
    points = ranked_points(session, board.id) if points is None else points
    top = [r.user for r in ranked[:TOP_USERS_PLOTTED]]
    best_so_far: dict[str, float] = {}
    history: dict[str, list[PlotPoint]] = {name: [] for name in top}
    for name, at, score, sub_id in points:
        if name in history and (name not in best_so_far or score < best_so_far[name]):
            best_so_far[name] = score
            history[name].append(PlotPoint(series=name, at=at, value=float(score), submission_id=sub_id))
    hist_traces = [
        {"name": name, "x": [_iso(p.at) for p in pts], "y": [p.value for p in pts], "step": True,
         "text": [f"{name}: {p.value:.4g} ms (#{p.submission_id})" for p in pts]}
        for name, pts in history.items() if pts
    ]
    unit = f"time (ms, measured on {board.gpu_type})"
    times = [at for _, at, _, _ in points]
    # Points from one moment would get a sub-second axis; show at least a day around them.
    x_range = ([_iso(min(times) - dt.timedelta(hours=12)), _iso(max(times) + dt.timedelta(hours=12))]
               if times and max(times) - min(times) < dt.timedelta(hours=1) else None)
    scores = [float(score) for _, _, score, _ in points if score and score > 0]
    spread = max(scores) / min(scores) if scores else 1.0
    users_title = "the top user" if len(top) == 1 else f"top {len(top)} users"
    history_plot = Plot(
        id="plot-history", series_title="User",
        spec={"title": f"Best time over time, {users_title}", "x_title": "submission time (UTC)",
              "y_title": unit, "y_log": False, "x_range": x_range, "traces": hist_traces},
        rows=sorted((p for pts in history.values() for p in pts), key=lambda p: (p.series, p.at)),
    )
    all_rows = [PlotPoint(series=name, at=at, value=float(score), submission_id=sub_id)
                for name, at, score, sub_id in points]
    all_plot = Plot(
        id="plot-all", series_title="User",
        spec={"title": f"All ranked times ({len(all_rows)} run{'' if len(all_rows) == 1 else 's'})",
              "x_title": "submission time (UTC)", "y_title": unit, "y_log": spread > 10, "x_range": x_range,
              "traces": [{"name": "ranked runs", "mode": "markers", "marker_size": 5,
                          "x": [_iso(p.at) for p in all_rows], "y": [p.value for p in all_rows],
                          "text": [f"{p.series}: {p.value:.4g} ms (#{p.submission_id})" for p in all_rows]}]
              if all_rows else []},
        rows=all_rows,
    )
    return [history_plot, all_plot]


# ---------------------------------------------------------------- submission


@dataclass
class RunView:
    id: int
    mode: str
    secret: bool
    done: bool
    passed: bool
    worker: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    wall_s: float | None
    report: dict[str, Any] | None
    report_text: str
    stdout: str
    stderr: str
    error: str
    flag: str
    has_ncu_rep: bool
    private: bool = False  # the details above were withheld from this viewer


@dataclass
class SubmissionView:
    id: int
    user: str
    task: str
    gpu: str
    mode: str
    file_name: str
    code: str
    code_sha: str
    submitted_at: dt.datetime
    status: str
    status_text: str
    phase: str
    done: bool
    passed: bool | None
    score_ms: float | None
    score_label: str
    rank: int | None
    failure: str
    runs: list[RunView] = field(default_factory=list)
    code_html: str = ""  # the code highlighted (markup), filled by the page
    details_visible: bool = True  # the viewer is its owner or an admin
    code_visible: bool = True  # ... or its leaderboard has published code after the deadline
    waiting: str = ""  # why its queued jobs wait, when no connected worker can run them
    # which block order would be faster (leaderboard.suggestions.view), for its owner and the admins only
    suggestion: dict[str, Any] | None = None

    @property
    def suggestion_pending(self) -> bool:
        return self.suggestion is not None and self.suggestion["status"] in ("queued", "running")


def _phase(jobs: list[Job], now: dt.datetime) -> str:
    """What the workers are doing with the submission's jobs, e.g. 'public run: running on worker-1 (heartbeat
    2 s ago, attempt 1); secret run: queued'."""
    parts = []
    for job in jobs:
        name = "secret-seed run" if job.secret else f"{job.mode} run"
        if job.status == JobStatus.RUNNING:
            beat = job.heartbeat_at or job.claimed_at
            ago = f", heartbeat {max(0, int((now - beat).total_seconds()))} s ago" if beat else ""
            parts.append(f"{name}: running on {job.claimed_by or 'a worker'}{ago}, attempt {job.attempts}")
        elif job.status == JobStatus.QUEUED:
            parts.append(f"{name}: queued" + (f" (attempt {job.attempts + 1})" if job.attempts else ""))
        else:
            parts.append(f"{name}: {job.status}")
    return "; ".join(parts)


def _public_report(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """What anyone may read of a run's report: the system and the timing tables, less every message a
    submission could have written (an exception's text can carry its code)."""
    if not report:
        return None

    def row(item: dict[str, Any]) -> dict[str, Any]:
        passed = bool((item.get("check") or {}).get("passed")) and not item.get("error")
        kept = {k: v for k, v in item.items() if k not in ("error", "check", "message")}
        return {**kept, "check": {"passed": passed, "message": "" if passed else "failed"}}

    ranked = report.get("ranked") or {}
    return {"system": report.get("system"), "label": report.get("label"),
            "benchmarks": [row(r) for r in report.get("benchmarks") or []],
            "ranked": {**{k: v for k, v in ranked.items() if k != "cases"},
                       "cases": [row(r) for r in ranked.get("cases") or []]} if ranked else None}


def _visible_submission(session: Session, submission_id: int) -> Submission:
    sub = session.get(Submission, submission_id) if in_id_range(submission_id, session) else None
    if sub is None or not sub.leaderboard.visible:
        raise NotFound(f"submission {submission_id} not found")
    return sub


def _may_see(sub: Submission, viewer: Principal | None) -> tuple[bool, bool]:
    """(details, code) the viewer may see of `sub`."""
    user_id, admin = (viewer.user_id, viewer.is_admin) if viewer else (None, False)
    details = admin or (user_id is not None and sub.user_id == user_id)
    return details, details or code_visible(sub, user_id, admin)


def submission_view(session: Session, submission_id: int, viewer: Principal | None = None,
                    settings: Settings | None = None) -> SubmissionView:
    """The submission page's data; details (and code) blanked for a viewer the privacy rule keeps out."""
    sub = session.scalar(
        select(Submission).where(Submission.id == submission_id)
        .options(selectinload(Submission.runs).selectinload(Run.profile_files), selectinload(Submission.jobs),
                 selectinload(Submission.user), selectinload(Submission.leaderboard), selectinload(Submission.code))
    ) if in_id_range(submission_id, session) else None
    if sub is None or not sub.leaderboard.visible:
        raise NotFound(f"submission {submission_id} not found")
    details, code_ok = _may_see(sub, viewer)
    now = utcnow()
    done = sub.status in SubmissionStatus.FINISHED
    if sub.status == SubmissionStatus.ERROR:
        status_text = "service error"
    elif sub.status == SubmissionStatus.CANCELLED:
        status_text = "cancelled"
    elif done:
        status_text = "done · " + ("passed" if sub.passed else "failed") + (" · flagged" if sub.flagged else "")
    else:
        status_text = sub.status
    runs = []
    for run in sub.runs:
        runs.append(RunView(
            id=run.id, mode=run.mode, secret=run.secret, done=True, passed=bool(run.passed), worker=run.worker,
            started_at=run.started_at, finished_at=run.ended_at, wall_s=run.duration_s,
            report=None if run.secret else (run.result or None), report_text="" if run.secret else run.report_text,
            stdout="" if run.secret else run.stdout_tail, stderr="" if run.secret else run.stderr_tail,
            error="" if run.passed else run.reason, flag="", has_ncu_rep=bool(run.profile_files) and not run.secret,
        ))
    failure = ""
    if sub.status == SubmissionStatus.ERROR:
        failure = sub.error or "the service could not evaluate this submission"
    elif done and not sub.passed:
        public = [r for r in sub.runs if not r.secret and not r.passed]
        failure = public[0].reason if public and public[0].reason else (sub.error or "")
        if not failure and any(r.secret and not r.passed for r in sub.runs):
            failure = "the secret-seed run failed"
    if sub.flagged:
        failure = failure or f"flagged, not ranked: {sub.flag_reason}"
        for view in runs:
            if view.secret:
                view.flag = sub.flag_reason
    if not details:
        if sub.status == SubmissionStatus.ERROR:
            failure = "the service could not evaluate this submission"
        elif failure:
            failure = f"{'flagged, not ranked' if sub.passed else 'failed'}; the reason is shown to the submitter"
        for view in runs:
            view.report = _public_report(view.report)
            view.report_text = view.stdout = view.stderr = view.flag = view.error = ""
            view.has_ncu_rep, view.private = False, True
    rank = None
    if done and sub.mode == "ranked" and sub.passed and not sub.flagged:
        for row in board_ranks(session, board_id=sub.leaderboard_id, user_name=sub.user.name):
            if row.submission_id == sub.id:
                rank = row.rank
    system = next((r.system for r in sub.runs if not r.secret and r.system), {}) or {}
    label = f"measured on {system.get('gpu') or sub.leaderboard.gpu_type}"
    waiting = presence.waiting_reason(session, settings, sub) if settings is not None and not done else ""
    return SubmissionView(
        id=sub.id, user=sub.user.name, task=sub.leaderboard.task, gpu=sub.leaderboard.gpu_type, mode=sub.mode,
        file_name=sub.filename, code=sub.code.code if code_ok else "", code_sha=sub.code.sha256,
        submitted_at=sub.created_at, status=sub.status, status_text=status_text,
        phase="" if done else _phase(list(sub.jobs), now), done=done, passed=sub.passed, score_ms=sub.score_ms,
        score_label=label, rank=rank, failure=failure, runs=runs, details_visible=details, code_visible=code_ok,
        waiting=waiting, suggestion=suggestions.view(sub.suggestion) if details and sub.suggestion else None,
    )


def submission_code(session: Session, submission_id: int, viewer: Principal | None) -> tuple[str, str] | None:
    """(file name, code), or None when the submission exists but its code is not the viewer's to read."""
    sub = _visible_submission(session, submission_id)
    return (sub.filename, sub.code.code) if _may_see(sub, viewer)[1] else None


def suggested_code(session: Session, submission_id: int, viewer: Principal | None) -> tuple[str, str]:
    """(file name, the submission's file with the suggested order at its site) for its owner or an admin."""
    sub = _visible_submission(session, submission_id)
    row = sub.suggestion
    if not _may_see(sub, viewer)[0] or row is None or not row.patched_code:
        raise NotFound(f"submission {submission_id} has no suggested kernel you may download")
    return f"suggested_{sub.filename}", row.patched_code


def profile_file(session: Session, run_id: int, viewer: Principal | None) -> tuple[str, bytes]:
    """The first .ncu-rep of a run of the viewer's own (or, for an admin, anyone's) submission: the report holds
    the kernel's code."""
    run = session.get(Run, run_id) if in_id_range(run_id, session) else None
    if run is None or run.secret or not run.profile_files or not run.submission.leaderboard.visible \
            or not _may_see(run.submission, viewer)[0]:
        raise NotFound(f"run {run_id} has no .ncu-rep you may download")
    first = run.profile_files[0]
    return first.name, first.content


# ---------------------------------------------------------------- user


@dataclass
class UserBest:
    task: str
    gpu: str
    rank: int
    score_ms: float
    submitted_at: dt.datetime
    submission_id: int


@dataclass
class UserSubmission:
    id: int
    task: str
    gpu: str
    mode: str
    status: str
    score_ms: float | None
    file_name: str
    submitted_at: dt.datetime


@dataclass
class UserView:
    name: str
    since: dt.datetime | None
    n_submissions: int
    more: bool
    best: list[UserBest]
    submissions: list[UserSubmission]


def user_view(session: Session, name: str) -> UserView:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"user {name!r} not found")
    visible = Leaderboard.visible.is_(True)
    n_subs = session.scalar(select(func.count(Submission.id)).join(Leaderboard)
                            .where(Submission.user_id == user.id, visible)) or 0
    subs = session.execute(
        select(Submission.id, Leaderboard.task, Leaderboard.gpu_type, Submission.mode, Submission.status,
               Submission.passed, Submission.score_ms, Submission.filename, Submission.created_at)
        .join(Leaderboard).where(Submission.user_id == user.id, visible)
        .order_by(Submission.created_at.desc(), Submission.id.desc()).limit(USER_PAGE_SUBMISSIONS)
    ).all()
    shown = []
    for s in subs:
        status = s.status
        if status == SubmissionStatus.DONE:
            status = "passed" if s.passed else "failed"
        shown.append(UserSubmission(id=s.id, task=s.task, gpu=s.gpu_type, mode=s.mode, status=status,
                                    score_ms=s.score_ms, file_name=s.filename, submitted_at=s.created_at))
    boards = {b.id: b for b in session.scalars(select(Leaderboard).where(visible)).all()}
    best = [UserBest(task=boards[r.leaderboard_id].task, gpu=boards[r.leaderboard_id].gpu_type, rank=r.rank,
                     score_ms=r.score_ms, submitted_at=r.submitted_at, submission_id=r.submission_id)
            for r in board_ranks(session, user_name=user.name) if r.leaderboard_id in boards]
    best.sort(key=lambda b: (b.task, b.gpu))
    first = session.scalar(select(func.min(Submission.created_at)).where(Submission.user_id == user.id))
    return UserView(name=user.name, since=first, n_submissions=int(n_subs), more=n_subs > len(shown), best=best,
                    submissions=shown)

