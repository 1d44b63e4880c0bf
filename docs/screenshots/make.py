"""Render the committed screenshots of the leaderboard's web pages (docs/screenshots/*.png and README.md).

Starts `swizzlelab serve` with one CPU worker on a fresh SQLite file, fills it, and photographs each page in
chromium (Playwright), light at desktop width and dark at phone width. The data, stamped on every image:
- the H100 leaderboard run of the service (benchmarks/leaderboard_h100/leaderboard_h100.json) when that file
  exists: its ranked runs are written into the database through the models, as the service returned them;
- without it, the script says so and shows what can be made here: real test-mode submissions (correct and
  wrong Triton kernels) run by the CPU worker under the Triton interpreter, and, on histogram/H100, the task's
  own kernel as measured on an H100 by `swizzlelab eval` (tests/data/eval_h100, cut from the eval_h100 study), imported
  as one ranked run.

    python docs/screenshots/make.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from swizzlelab.leaderboard.db import Job, JobStatus, Leaderboard, Run, Submission, SubmissionStatus, User
from swizzlelab.leaderboard.db import open_database
from swizzlelab.leaderboard.service import store_code

ROOT = Path(__file__).resolve().parents[2]
H100_JSON = ROOT / "benchmarks" / "leaderboard_h100" / "leaderboard_h100.json"
EVAL_H100 = ROOT / "tests" / "data" / "eval_h100"  # the eval_h100 study's report (git 305b79c for the study)
ADMIN = "screenshots-admin-token"
CHROMIUM = "/usr/bin/chromium"

GOOD = (ROOT / "src/swizzlelab/tasks/histogram/kernel.py").read_text()
WRONG = '''"""A histogram that forgets the last row of every block: it fails the tests (for the screenshots)."""

import torch
import triton
import triton.language as tl


@triton.jit
def channel_histogram(x_ptr, out_ptr, n_rows, n_channels, BLOCK_R: tl.constexpr):
    c = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows - 1  # off by one
    values = tl.load(x_ptr + rows.to(tl.int64) * n_channels + c, mask=ok, other=0).to(tl.int32)
    counts = tl.histogram(values, 256, mask=ok)
    tl.atomic_add(out_ptr + c * 256 + tl.arange(0, 256), counts, sem="relaxed")


def custom_kernel(data):
    x, out = data["x"], data["out"]
    rows, channels = x.shape
    out.zero_()
    print("launching", triton.cdiv(rows, 64), "row blocks")
    channel_histogram[(channels, triton.cdiv(rows, 64))](x, out, rows, channels, BLOCK_R=64)
    return out
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(db_url: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swizzlelab.cli", "serve", "--port", str(port), "--db", db_url, "--workers", "1",
         "--admin-token", ADMIN, "--data-dir", str(workdir / "data")], cwd=workdir, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/api/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("swizzlelab serve did not start within 90 s")


def _insert_ranked(db_url: str, rows: list[dict], label: str) -> list[int]:
    """Ranked runs written through the models: rows of {task, gpu, user, submitted_at, result, report_text,
    filename, code}; each gets its public run and a passing secret run with the same result."""
    db = open_database(db_url)
    ids = []
    with db.write() as session:
        for row in rows:
            board = session.scalar(select(Leaderboard).where(Leaderboard.task == row["task"],
                                                             Leaderboard.gpu_type == row["gpu"]))
            user = session.scalar(select(User).where(User.name == row["user"]))
            if user is None:
                user = User(name=row["user"])
                session.add(user)
                session.flush()
            at = row["submitted_at"]
            result = row["result"]
            score = row.get("score_ms", (result.get("ranked") or {}).get("score_ms"))
            sub = Submission(user_id=user.id, leaderboard_id=board.id, code=store_code(session, row["code"]),
                             filename=row["filename"], mode="ranked", created_at=at, finished_at=at,
                             status=SubmissionStatus.DONE, passed=True, score_ms=score)
            session.add(sub)
            session.flush()
            for secret in (False, True):
                job = Job(submission_id=sub.id, mode="ranked", secret=secret, gpu_type=board.gpu_type,
                          status=JobStatus.DONE, claimed_by=label, attempts=1, created_at=at, finished_at=at)
                session.add(job)
                session.flush()
                session.add(Run(submission_id=sub.id, job_id=job.id, mode="ranked", secret=secret, worker=label,
                                gpu=(result.get("system") or {}).get("gpu", row["gpu"]),
                                system=result.get("system") or {}, started_at=at, ended_at=at,
                                duration_s=float(row.get("duration_s", 0.0)), passed=True, score_ms=score,
                                result=result, report_text=row.get("report_text", "")))
            ids.append(sub.id)
    db.dispose()
    return ids


def h100_rows(data: dict) -> list[dict]:
    """Ranked runs from benchmarks/leaderboard_h100/leaderboard_h100.json (written by that folder's run.py): its
    'ranking' as the service returned it, joined by submission id with its 'submissions' (kernel file, report
    text, and the run's full result where the file carries one)."""
    board = data.get("leaderboard") or {}
    by_id = {item.get("submission_id"): item for item in data.get("submissions", [])}
    rows = []
    for entry in data.get("ranking") or []:
        item = by_id.get(entry.get("submission_id"), {})
        kernel = ROOT / item["kernel"] if item.get("kernel") else None
        code = kernel.read_text() if kernel is not None and kernel.is_file() else (
            f"# the code of {entry['user']}'s submission is not in leaderboard_h100.json\n")
        result = item.get("result") or {"ranked": {"cases": [], "score_ms": entry["score_ms"]},
                                        "system": {"gpu": item.get("measured_on") or data.get("device") or ""}}
        when = entry.get("submitted_at")
        rows.append({"task": board.get("task", "histogram"), "gpu": board.get("gpu_type", "H100"),
                     "user": entry["user"], "score_ms": entry["score_ms"], "result": result,
                     "report_text": item.get("report_text") or "", "filename": entry.get("filename") or "submission.py",
                     "code": code, "duration_s": (item.get("run_durations_s") or {}).get("public", 0.0),
                     "submitted_at": dt.datetime.fromisoformat(when) if when else dt.datetime.now(dt.timezone.utc)})
    return rows


def eval_h100_rows() -> list[dict]:
    report = json.loads((EVAL_H100 / "histogram-ranked.json").read_text())
    text = (EVAL_H100 / "histogram-ranked.txt").read_text() if (EVAL_H100 / "histogram-ranked.txt").exists() else ""
    # When the measurement was committed (a file's mtime would only say when it was checked out).
    committed = subprocess.run(["git", "log", "-1", "--format=%cI", "--", "tests/data/eval_h100/histogram-ranked.json"],
                               capture_output=True, text=True, cwd=ROOT).stdout.strip()
    stamp = dt.datetime.fromisoformat(committed) if committed else dt.datetime.now(dt.timezone.utc)
    return [{"task": "histogram", "gpu": "H100", "user": "swizzlelab-eval", "result": report, "report_text": text,
             "filename": "histogram_kernel.py", "code": GOOD, "submitted_at": stamp}]


def submit(url: str, token: str, code: str, filename: str) -> int:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        answer = client.post("/api/submissions", json={"task": "histogram", "gpu_type": "H100", "mode": "test",
                                                        "code": code, "filename": filename})
        answer.raise_for_status()
        return answer.json()["id"]


def wait_done(url: str, token: str, sub_id: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while client.get(f"/api/submissions/{sub_id}").json()["status"] not in ("done", "error"):
            if time.monotonic() > deadline:
                raise SystemExit(f"submission {sub_id} did not finish in {timeout_s:.0f} s")
            time.sleep(1)


BANNER = """(label) => { const d = document.createElement('div'); d.textContent = label;
d.style.cssText = 'position:sticky;top:0;z-index:99;background:#fff3bf;color:#5c3c00;font:13px system-ui;' +
'padding:6px 12px;border-bottom:1px solid #e0c060'; document.body.prepend(d); }"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'screens.db'}"
        proc, url = start(db_url, workdir)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
                tokens = {name: admin.post("/api/users", json={"name": name}).json()["token"]
                          for name in ("ada", "grace")}
            data = json.loads(H100_JSON.read_text()) if H100_JSON.exists() else {}
            h100 = h100_rows(data)
            if h100:
                _insert_ranked(db_url, h100, "h100-leaderboard-run")
                source = (f"ranked runs: {H100_JSON.relative_to(ROOT)} (measured on "
                          f"{data.get('device') or 'an H100'} by the service's GPU worker)")
            else:
                why = "not found" if not H100_JSON.exists() else f"has no ranking ({data.get('status', 'empty')})"
                print(f"{H100_JSON.relative_to(ROOT)} {why}: no H100 leaderboard data; ranked rows come from "
                      f"{EVAL_H100.relative_to(ROOT)} only", flush=True)
                _insert_ranked(db_url, eval_h100_rows(), "imported:tests/data/eval_h100")
                source = ("ranked row: the task's own kernel measured on an H100 by `swizzlelab eval` "
                          "(tests/data/eval_h100), imported; no H100 leaderboard ranking yet")
            good = submit(url, tokens["ada"], GOOD, "histogram_kernel.py")
            bad = submit(url, tokens["grace"], WRONG, "off_by_one.py")
            wait_done(url, tokens["ada"], good)
            wait_done(url, tokens["grace"], bad)
            cpu = "test runs: real, by a CPU worker (Triton interpreter, correctness only)"
            label = f"swizzlelab screenshot · {source} · {cpu}"
            shots = [("index", "/"), ("leaderboard", "/lb/histogram/H100"), ("submission-test-passed",
                     f"/submissions/{good}"), ("submission-test-failed", f"/submissions/{bad}"),
                     ("user", "/users/ada"), ("submit", "/submit")]
            ranked = httpx.get(url + "/api/leaderboards/histogram/H100/ranking").json()["ranking"]
            if ranked:
                shots.append(("submission-ranked", f"/submissions/{ranked[0]['submission_id']}"))
            args.out.mkdir(parents=True, exist_ok=True)
            made = []
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                for variant, options in (("", {"viewport": {"width": 1280, "height": 900}}),
                                         ("-phone-dark", {"viewport": {"width": 390, "height": 844},
                                                          "color_scheme": "dark", "device_scale_factor": 2})):
                    context = browser.new_context(**options)
                    page = context.new_page()
                    for name, path in shots:
                        if variant and name not in ("leaderboard", "submission-test-failed"):
                            continue
                        page.goto(url + path, wait_until="load")
                        page.evaluate(BANNER, label)
                        page.wait_for_timeout(300)
                        target = args.out / f"{name}{variant}.png"
                        page.screenshot(path=str(target), full_page=True)
                        made.append((target.name, path))
                    context.close()
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    lines = ["# Screenshots of the leaderboard's web pages", "",
             f"Made by `python docs/screenshots/make.py` ({dt.date.today().isoformat()}); each image carries this "
             "label at its top:", "", f"> {label}", ""]
    if not h100:
        lines += [f"`{H100_JSON.relative_to(ROOT)}` held no ranking yet, so the leaderboard holds one imported H100 "
                  "measurement and no leaderboard submissions; rerun the script once the service's H100 run is "
                  "committed to show its ranking.", ""]
    lines += ["| file | page |", "| --- | --- |"] + [f"| {name} | `{path}` |" for name, path in made]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(made)} screenshots and README.md to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
