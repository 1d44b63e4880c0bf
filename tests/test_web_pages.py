"""Browser tests of the leaderboard's web pages: a real `swizzlelab serve` on 127.0.0.1 with a SQLite file, a real
CPU worker running test-mode jobs, and Debian's chromium driven by Playwright.

Ranked and profile runs need a GPU, so the leaderboard's ranked rows are written into the database through the
models from H100 eval reports (tests/data/eval_h100, cut from benchmarks/eval_h100), times rescaled per user; the
tests' submissions go through the form and a worker. Screenshots of every page land in tmp/artifacts/web/ (or
$SWIZZLELAB_TEST_ARTIFACTS).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from leaderboard_support import ADMIN_TOKEN, ROOT, kernel_source, start_service
from sqlalchemy import select

from swizzlelab.leaderboard.db import Job, JobStatus, Leaderboard, ProfileFile, Run, Submission, SubmissionStatus, User
from swizzlelab.leaderboard.db import open_database
from swizzlelab.leaderboard.service import store_code

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("SWIZZLELAB_TEST_ARTIFACTS", ROOT / "tmp" / "artifacts" / "web"))
EVAL_DIR = ROOT / "tests" / "data" / "eval_h100"  # cut from benchmarks/eval_h100 (README there)
NCU_REP_BYTES = b"stand-in bytes of an .ncu-rep file (the download test checks the bytes come back unchanged)"
XSS_MARK = "<script>window.__pwned = 1</script>"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install -y chromium; .ci/run installs it)")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """A server without workers (tests start one when they want their job to run) and two users."""
    workdir = tmp_path_factory.mktemp("web")
    db_url = f"sqlite:///{workdir / 'leaderboard.db'}"
    service = start_service(db_url, workdir, "--workers", "0")
    try:
        with service.client(ADMIN_TOKEN) as admin:
            tokens = {name: admin.post("/api/users", json={"name": name}).json()["token"]
                      for name in ("alice", "bob_the_builder")}
        service.tokens = tokens  # type: ignore[attr-defined]
        service.seeded = seed_ranked_runs(db_url)  # type: ignore[attr-defined]
        yield service
    finally:
        service.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


def login(page, base_url: str, token: str, next_path: str = "/") -> None:
    """Log in through the login form (its CSRF token and session cookie as a browser gets them)."""
    page.goto(f"{base_url}/login?next={next_path}")
    page.fill("input[name=token]", token)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"**{next_path}")


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5000
    return path


# ---------------------------------------------------------------- data written through the models


def _rescaled(report: dict, factor: float) -> dict:
    out = copy.deepcopy(report)
    for row in out["ranked"]["cases"] + out.get("benchmarks", []):
        cand = row.get("candidate")
        if cand:
            for key in ("mean_ms", "std_ms", "best_ms", "worst_ms", "sem_ms"):
                if cand.get(key) is not None:
                    cand[key] *= factor
            cand["samples_ms"] = [s * factor for s in cand.get("samples_ms", [])]
    if out["ranked"].get("score_ms") is not None:
        out["ranked"]["score_ms"] *= factor
    return out


def seed_ranked_runs(db_url: str) -> dict:
    """Ranked histogram/H100 runs of three users over three days (the first user twice), and one profile run."""
    ranked = json.loads((EVAL_DIR / "histogram-ranked.json").read_text())
    profile = json.loads((EVAL_DIR / "histogram-profile.json").read_text())
    db = open_database(db_url)
    start = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.timezone.utc)
    plan = [("carol", 1.00, 0), ("dave", 1.35, 1), ("carol", 0.82, 2), ("erin", 2.10, 2)]
    ids: dict = {"ranked": []}
    with db.write() as session:
        board = session.scalar(select(Leaderboard).where(Leaderboard.task == "histogram",
                                                         Leaderboard.gpu_type == "H100"))
        code = store_code(session, (ROOT / "src/swizzlelab/tasks/histogram/kernel.py").read_text())
        users = {}
        for name in {"carol", "dave", "erin"}:
            users[name] = User(name=name)
            session.add(users[name])
        session.flush()

        def add(user, mode, result, at, passed=True):
            score = result["ranked"]["score_ms"] if mode == "ranked" else None
            sub = Submission(user_id=user.id, leaderboard_id=board.id, code=code, filename=f"{user.name}_hist.py",
                             mode=mode, created_at=at, finished_at=at + dt.timedelta(minutes=1),
                             status=SubmissionStatus.DONE, passed=passed, score_ms=score)
            session.add(sub)
            session.flush()
            run = None
            for secret in ((False, True) if mode == "ranked" else (False,)):
                job = Job(submission_id=sub.id, mode=mode, secret=secret, gpu_type="H100", status=JobStatus.DONE,
                          claimed_by="seed", attempts=1, created_at=at, finished_at=at)
                session.add(job)
                session.flush()
                made = Run(submission_id=sub.id, job_id=job.id, mode=mode, secret=secret, worker="seed",
                           gpu=result["system"]["gpu"], system=result["system"], started_at=at,
                           ended_at=at + dt.timedelta(seconds=50), duration_s=50.0, passed=passed, score_ms=score,
                           result=result, report_text=f"> {mode} report of {user.name}\n")
                session.add(made)
                session.flush()
                run = run or made
            return sub, run

        for name, factor, day in plan:
            sub, _ = add(users[name], "ranked", _rescaled(ranked, factor), start + dt.timedelta(days=day))
            ids["ranked"].append(sub.id)
        sub, run = add(users["dave"], "profile", profile, start + dt.timedelta(days=2, hours=3))
        session.add(ProfileFile(run_id=run.id, name="histogram-11.ncu-rep", size_bytes=len(NCU_REP_BYTES),
                                content=NCU_REP_BYTES))
        ids["profile"], ids["profile_run"] = sub.id, run.id
        ids["best_ms"] = ranked["ranked"]["score_ms"] * 0.82
    db.dispose()
    return ids


# ---------------------------------------------------------------- tests


def csp_refusals(page) -> list[str]:
    """The console messages of the page that say the Content-Security-Policy refused something (filled as it runs)."""
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    return refused


def test_index_leaderboard_submission_navigation(web, page):
    refused = csp_refusals(page)
    page.goto(web.url + "/")
    row = page.locator("#leaderboards tr", has=page.locator("a[href='/lb/histogram/H100']"))
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == "histogram" and cells[1] == "H100"
    assert cells[3] == "carol" and cells[4] == "3"  # #1 user, entrants
    assert abs(float(cells[2]) - web.seeded["best_ms"]) / web.seeded["best_ms"] < 1e-3
    shot(page, "index")

    page.click("a[href='/lb/histogram/H100'] >> nth=0")
    page.wait_for_url("**/lb/histogram/H100")
    ranks = page.locator("#ranking tbody tr")
    assert ranks.count() == 3
    first = ranks.nth(0).locator("td").all_inner_texts()
    assert first[0] == "1" and first[1].startswith("carol") and "(+1)" in first[1]
    assert "±" in first[2]
    assert [ranks.nth(i).locator("td").nth(1).inner_text().split()[0] for i in range(3)] == ["carol", "dave", "erin"]
    assert page.locator(".switcher a[href='/lb/histogram/H200']").count() == 1  # GPU switcher
    assert "Per-channel histograms" in page.inner_text("#task-description")
    page.wait_for_selector("#plot-history[data-drawn='1'] .main-svg")  # Plotly drew the progress plot
    page.wait_for_selector("#plot-all[data-drawn='1'] .main-svg")
    assert refused == [], refused  # the pages' own policy lets Plotly draw
    shot(page, "leaderboard")

    reference = page.request.get(web.url + "/lb/histogram/H100/reference.py")
    assert reference.ok and "def ref_kernel" in reference.text()
    starter = page.request.get(web.url + "/lb/histogram/H100/starter.py")
    assert starter.ok and "def custom_kernel" in starter.text()

    ranks.nth(0).locator("td").last.locator("a").click()
    page.wait_for_url(re.compile(r".*/submissions/\d+$"))
    assert "done · passed" in page.inner_text("#status")
    assert page.locator("table[id^=ranked-] tbody tr").count() == 1  # timing tables are public ...
    assert "NVIDIA H100 80GB HBM3" in page.inner_text("main")
    assert "rank 1" in page.inner_text("dl.facts")
    assert page.locator("#code").count() == 0 and page.locator("a[href$='/code.py']").count() == 0  # ... code is not
    assert "shown to its owner and the admins" in page.inner_text("#private-note")
    submission_path = urlsplit(page.url).path
    login(page, web.url, ADMIN_TOKEN, submission_path)  # an admin sees everyone's code
    assert page.locator("#code .highlight .k").count() > 0  # keywords highlighted by Pygments
    assert page.locator("#private-note").count() == 0 and page.inner_text("#viewer") == "admin"
    shot(page, "submission-ranked")

    page.click("dl.facts a[href='/users/carol']")
    page.wait_for_url("**/users/carol")
    best = page.locator("#best tbody tr").first.locator("td").all_inner_texts()
    assert best[0] == "histogram · H100" and best[1] == "1"
    assert page.locator("#submissions tbody tr").count() == 2
    shot(page, "user")


def test_profile_submission_shows_ncu_tables_and_download(web, page):
    path = f"/submissions/{web.seeded['profile']}"
    page.goto(web.url + path)
    assert page.locator("table.ncu").count() == 0  # the profile shows the kernel's code: its owner's and admins'
    assert page.request.get(f"{web.url}/runs/{web.seeded['profile_run']}/profile.ncu-rep").status == 404
    login(page, web.url, ADMIN_TOKEN, path)
    tables = page.locator("table.ncu")
    assert tables.count() >= 1
    text = tables.first.inner_text()
    assert "L2_Cache_Hit_Rate" in text and "DRAM_Throughput" in text and "%" in text
    link = page.locator("a[href$='profile.ncu-rep']")
    assert link.count() == 1
    body = page.request.get(web.url + link.get_attribute("href")).body()
    assert body == NCU_REP_BYTES
    shot(page, "submission-profile")


def test_leaderboard_reads_without_javascript_and_at_phone_width_in_dark_mode(web, browser):
    context = browser.new_context(java_script_enabled=False, viewport={"width": 390, "height": 844},
                                  color_scheme="dark")
    page = context.new_page()
    try:
        page.goto(web.url + "/lb/histogram/H100")
        page.click("details.plot-table >> nth=0 >> summary")
        history = page.locator("details.plot-table").first.locator("tbody tr")
        assert history.count() >= 3  # carol twice (best improved), dave, erin
        assert page.locator("#plot-history .main-svg").count() == 0  # no JS: no plot, the table instead
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no page-wide horizontal scroll
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"  # the dark palette
        shot(page, "leaderboard-phone-dark-nojs")
    finally:
        context.close()


def _wait_status(page, text: str, timeout_s: float) -> None:
    page.wait_for_function("t => (document.querySelector('#status') || {}).textContent.includes(t)", arg=text,
                           timeout=timeout_s * 1000)


def test_submit_through_form_and_watch_run_become_done(web, page):
    page.goto(web.url + "/")
    page.click("header nav a[href='/submit']")
    page.select_option("select[name=leaderboard]", "histogram/H100")
    page.select_option("select[name=mode]", "test")
    page.set_input_files("input[name=file]", files=[{"name": "my_hist.py", "mimeType": "text/x-python",
                                                     "buffer": kernel_source(correct=True).encode()}])
    page.fill("input[name=token]", web.tokens["alice"])
    page.check("input[name=remember]")
    shot(page, "submit")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/submissions/\d+$"))
    assert web.tokens["alice"] not in page.url
    assert page.evaluate("localStorage.getItem('swizzlelab-token')") == web.tokens["alice"]
    # No worker runs yet: the page says queued and reloads itself.
    assert page.inner_text("#status") == "queued"
    assert page.locator("meta[http-equiv=refresh]").count() == 1
    assert "reloads itself" in page.inner_text("#refresh-note")
    shot(page, "submission-queued")

    web.start_worker("web-cpu-1")
    _wait_status(page, "done", 240)
    assert page.inner_text("#status") == "done · passed"
    assert page.locator("meta[http-equiv=refresh]").count() == 0
    assert page.locator("table.tests tbody tr").count() == 4
    assert "Triton" in page.inner_text("main")
    shot(page, "submission-test-done")

    # The token typed once is still in this browser when the form is opened again.
    page.goto(web.url + "/submit")
    assert page.input_value("input[name=token]") == web.tokens["alice"]


XSS_SUBMISSION = f'''
import sys
print({XSS_MARK!r})
print({"<img src=x onerror=window.__pwned=2>"!r}, file=sys.stderr)


def custom_kernel(data):
    raise ValueError({"<b onmouseover=alert(1)>bold</b>"!r})
'''


def test_submission_printing_script_tags_renders_as_text(web, page):
    with web.client(web.tokens["bob_the_builder"]) as client:
        answer = client.post("/api/submissions", json={"task": "histogram", "gpu_type": "H100", "mode": "test",
                                                        "code": XSS_SUBMISSION, "filename": "evil.py"})
        assert answer.status_code == 201, answer.text
        sub_id = answer.json()["id"]
        if not any(w.poll() is None for w in web.workers):
            web.start_worker("web-cpu-2")
        deadline = time.monotonic() + 240
        while client.get(f"/api/submissions/{sub_id}").json()["status"] not in ("done", "error"):
            assert time.monotonic() < deadline, "the worker did not finish the job in 240 s"
            time.sleep(1)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{web.url}/submissions/{sub_id}")
    assert "failed" in page.inner_text("#status")
    # Nobody but its owner (and admins) reads its output, reason or code ...
    anonymous = page.inner_text("main")
    assert XSS_MARK not in anonymous and "onerror" not in anonymous and "bold" not in anonymous
    assert page.locator("pre.stdout, pre.stderr, #code").count() == 0
    assert page.request.get(f"{web.url}/submissions/{sub_id}/code.py").status == 403
    # ... and its owner reads them as text.
    login(page, web.url, web.tokens["bob_the_builder"], f"/submissions/{sub_id}")
    assert page.locator("#code").count() == 1 and page.locator("#private-note").count() == 0
    main = page.inner_text("main")
    assert XSS_MARK in main  # shown as text ...
    assert page.evaluate("window.__pwned") is None  # ... never run
    assert page.locator("main script").count() == 0
    assert page.locator("main img, main b").count() == 0
    assert "<b onmouseover=alert(1)>bold</b>" in page.inner_text("#code")
    assert not dialogs
    shot(page, "submission-xss-as-text")


def test_form_refuses_missing_csrf_other_origins_and_bad_tokens(web, page):
    files = {"file": ("k.py", kernel_source().encode(), "text/x-python")}
    data = {"leaderboard": "histogram/H100", "mode": "test", "token": web.tokens["alice"]}
    answer = httpx.post(web.url + "/submit", data=data, files=files)
    assert answer.status_code == 403 and "security token" in answer.text
    too_big = httpx.post(web.url + "/submit", data=data, files={"file": ("k.py", b"#" * 200_000, "text/x-python")})
    assert too_big.status_code == 413 and "at most 65536 bytes" in too_big.text

    with httpx.Client(base_url=web.url) as client:
        form = client.get("/submit")
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', form.text).group(1)
        forged = client.post("/submit", data={**data, "csrf_token": token}, files=files,
                             headers={"Origin": "http://evil.example"})
        assert forged.status_code == 403 and "another site" in forged.text
        wrong = client.post("/submit", data={**data, "csrf_token": "0" * 64}, files=files)
        assert wrong.status_code == 403

    page.goto(web.url + "/submit")
    page.set_input_files("input[name=file]", files=[{"name": "k.py", "mimeType": "text/x-python",
                                                     "buffer": kernel_source().encode()}])
    page.fill("input[name=token]", "slb_not-a-real-token")
    page.click("button[type=submit]")
    assert page.inner_text("#form-error") == "invalid or revoked token"
    assert "/submit" in page.url and "slb_" not in page.url

    page.goto(web.url + "/submissions/999999")
    assert "submission 999999 not found" in page.inner_text("#error-reason")


def test_api_docs_render_with_the_network_closed(web, page):
    """Swagger UI's files come from the server itself (fastapi-offline): with every other address refused, /docs
    still lists the operations."""
    elsewhere: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(web.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_this_server)
    refused = csp_refusals(page)
    page.goto(web.url + "/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/api/submissions/{submission_id}/cancel" in paths and len(paths) >= 20
    assert elsewhere == [], elsewhere
    assert refused == [], refused
    shot(page, "api-docs-offline")


def test_login_shows_the_name_and_logout_ends_the_session(web, page):
    login(page, web.url, web.tokens["alice"], "/")
    assert page.inner_text("#viewer") == "alice"
    page.goto(web.url + "/submit")
    assert "Submitting as alice" in page.inner_text("#submitting-as")
    page.click("#logout-link")
    page.click("#logout-form button[type=submit]")
    page.wait_for_url(web.url + "/")
    assert page.locator("#login-link").count() == 1 and page.locator("#viewer").count() == 0
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert "swizzlelab_session" not in cookies
    page.goto(web.url + "/login")
    page.fill("input[name=token]", "slb_not-a-real-token")
    page.click("#login-form button[type=submit]")
    assert page.inner_text("#form-error") == "invalid or revoked token"
