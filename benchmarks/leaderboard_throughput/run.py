"""Throughput of the leaderboard service on the CPU: N test-mode submissions from C concurrent clients against one
`swizzlelab serve` (SQLite, local CPU workers); checks that none is lost or run twice, and records p50/p95 API
latency and jobs per minute.

    python -m benchmarks.leaderboard_throughput.run [--submissions 200] [--clients 20] [--workers 2]

Writes benchmarks/leaderboard_throughput/leaderboard_throughput.json (or --out). Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import func, select

from swizzlelab.harness.sysinfo import cpu_name
from swizzlelab.io import atomic_write_text
from swizzlelab.leaderboard.db import Job, Run, Submission, open_database

from benchmarks.lab.serve import start, stop

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "bench-admin-token"
# The per-channel tl.histogram submission of the service's GPU run (benchmarks/leaderboard_h100): on the CPU it runs
# under the interpreter with 64-row blocks.
KERNEL = ROOT / "benchmarks" / "leaderboard_h100" / "kernels" / "channel_histogram.py"


def kernel_source(correct: bool = True) -> str:
    """The submission's code; the wrong one adds 1 to every bin of every program."""
    code = KERNEL.read_text()
    wrong = code.replace("counts, sem=", "counts + 1, sem=")
    if wrong == code:
        raise SystemExit(f"{KERNEL}: no 'counts, sem=' to make the wrong kernel from")
    return code if correct else wrong


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("leaderboard_throughput.json"))
    args = parser.parse_args()
    if args.submissions % args.clients:
        parser.error("--submissions must be a multiple of --clients")

    work = Path(tempfile.mkdtemp(prefix="swizzlelab-throughput-"))
    db_url = f"sqlite:///{work / 'leaderboard.db'}"
    served = start(db_url, work, work / "serve.log", "--workers", str(args.workers), "--admin-token", ADMIN,
                   "--requests-per-minute", "1000000", "--submissions-per-hour", "100000")
    base, server = served.base, served.process
    try:
        tokens = []
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            for i in range(args.clients):
                tokens.append(admin.post("/api/users", json={"name": f"client{i:02d}"}).json()["token"])

        per_client = args.submissions // args.clients
        submit_ms: list[float] = []
        status_ms: list[float] = []
        expected: dict[int, bool] = {}
        errors: list[str] = []
        lock = threading.Lock()

        def client(index: int) -> None:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens[index]}"}, timeout=60) as http:
                pending: dict[int, bool] = {}
                for k in range(per_client):
                    correct = (index + k) % 2 == 0
                    code = kernel_source(correct) + f"\n# client {index} submission {k}\n"
                    t0 = time.perf_counter()
                    response = http.post("/api/submissions", json={"task": "histogram", "mode": "test", "code": code,
                                                                  "filename": f"c{index}_{k}.py"})
                    with lock:
                        submit_ms.append((time.perf_counter() - t0) * 1e3)
                    if response.status_code != 201:
                        with lock:
                            errors.append(f"submit {response.status_code}: {response.text[:200]}")
                        continue
                    pending[response.json()["id"]] = correct
                with lock:
                    expected.update(pending)
                while pending:
                    for sub_id in list(pending):
                        t0 = time.perf_counter()
                        view = http.get(f"/api/submissions/{sub_id}").json()
                        with lock:
                            status_ms.append((time.perf_counter() - t0) * 1e3)
                        if view["status"] in ("done", "error"):
                            if view["status"] == "error" or view["passed"] is not pending[sub_id]:
                                with lock:
                                    errors.append(f"submission {sub_id}: {view['status']} passed={view['passed']}")
                            del pending[sub_id]
                    time.sleep(1.0)

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started

        db = open_database(db_url, upgrade=False)
        with db.read() as session:
            n_subs = session.scalar(select(func.count(Submission.id)))
            n_done = session.scalar(select(func.count(Submission.id)).where(Submission.status == "done"))
            n_runs = session.scalar(select(func.count(Run.id)))
            n_distinct_jobs = session.scalar(select(func.count(func.distinct(Run.job_id))))
            n_jobs = session.scalar(select(func.count(Job.id)))
            attempts = session.scalars(select(Job.attempts)).all()
            run_s = [r.duration_s for r in session.scalars(select(Run)).all()]
            first = session.scalar(select(func.min(Submission.created_at)))
            last = session.scalar(select(func.max(Submission.finished_at)))
        db.dispose()
        wall_s = (last - first).total_seconds()
        result = {
            "what": "leaderboard service throughput: test-mode histogram submissions (Triton interpreter on the CPU)",
            "measured_on": f"CPU only: {cpu_name()}, {os.cpu_count()} cores; {platform.platform()}",
            "device": f"CPU only: {cpu_name()}",
            "command": "python -m benchmarks.leaderboard_throughput.run " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "script": "benchmarks/leaderboard_throughput/run.py",
            "database": "SQLite (WAL)",
            "server": "swizzlelab serve (uvicorn, one process)",
            "workers": args.workers,
            "clients": args.clients,
            "submissions_sent": args.submissions,
            "submissions_in_db": n_subs,
            "submissions_done": n_done,
            "jobs": n_jobs,
            "runs": n_runs,
            "runs_for_distinct_jobs": n_distinct_jobs,
            "max_claims_per_job": max(attempts) if attempts else None,
            "lost": args.submissions - n_done,
            "duplicated": n_runs - n_distinct_jobs,
            "verdict_mismatches_or_errors": errors,
            "api_latency_ms": {
                "submit": {"n": len(submit_ms), "p50": _percentile(submit_ms, 0.5), "p95": _percentile(submit_ms, 0.95),
                           "max": max(submit_ms)},
                "status": {"n": len(status_ms), "p50": _percentile(status_ms, 0.5), "p95": _percentile(status_ms, 0.95),
                           "max": max(status_ms)},
            },
            "evaluation_s_per_job": {"mean": statistics.fmean(run_s), "p50": _percentile(run_s, 0.5),
                                     "p95": _percentile(run_s, 0.95)},
            "first_submit_to_last_result_s": wall_s,
            "jobs_per_minute": n_runs / wall_s * 60 if wall_s > 0 else None,
            "client_wall_s": elapsed,
        }
        atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: result[k] for k in ("submissions_done", "lost", "duplicated", "api_latency_ms",
                                                 "jobs_per_minute")}, indent=2))
        if errors or result["lost"] or result["duplicated"]:
            sys.exit(1)
    finally:
        stop(server)


if __name__ == "__main__":
    main()
