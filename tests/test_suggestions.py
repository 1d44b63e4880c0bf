"""Suggestions (which block order would make a submission faster): queued with a passing run on real SQLite and
Postgres, claimed only by a worker that can make them, never touching the verdict; the measured statistics; and a
real `swizzlelab serve` with a CPU worker making a predicted suggestion for a Triton matmul (interpreter), read
through the CLI, the API (its owner only) and the submission page in Chromium."""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pytest
from leaderboard_support import (
    ADMIN_TOKEN,
    ROOT,
    db_url,  # noqa: F401 - fixture
    postgres_server,  # noqa: F401 - fixture
    start_service,
    swizzlelab,
    wait_for,
)

from swizzlelab.leaderboard import queue, service, suggestions
from swizzlelab.leaderboard.auth import create_user
from swizzlelab.leaderboard.db import Submission, SuggestionStatus, open_database
from swizzlelab.leaderboard.db.models import utcnow
from swizzlelab.leaderboard.outcome import Outcome
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.harness.isolate import Limits
from swizzlelab.optimize.suggest import Ask, Candidate, Figure, Suggestion, SuggestYielded, compare_runs, measure

FIXTURES = ROOT / "tests" / "fixtures" / "suggest"
SMALL_TASK = ROOT / "tests" / "data" / "matmul_small"  # matmul with a 48x32x32 benchmark: timeable on the CPU
RANKED_REPORT = ROOT / "tests" / "data" / "eval_h100" / "histogram-ranked.json"  # an H100 ranked run's report
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("SWIZZLELAB_TEST_ARTIFACTS", ROOT / "tmp" / "artifacts" / "web"))
TRITON_CODE = "import triton\n\n@triton.jit\ndef k(x):\n    pid = tl.program_id(0)\n\ndef custom_kernel(data):\n    return data\n"


# ---------------------------------------------------------------- the queue, on both databases


@pytest.fixture
def fresh(db_url):  # noqa: F811
    settings = Settings(db_url=db_url, heartbeat_interval_s=0.2, heartbeat_timeout_s=1.0)
    db = open_database(db_url)
    service.seed_fresh_database(db, settings)
    with db.write() as session:
        uid = create_user(session, "alice")[0].id
    yield db, settings, uid
    db.dispose()


def _outcome(passed: bool, result: dict) -> Outcome:
    now = utcnow()
    score = result.get("ranked", {}).get("score_ms") if passed else None
    return Outcome(passed=passed, score_ms=score, reason="" if passed else "wrong", report_text="r\n", result=result,
                   stdout_tail="", stderr_tail="", system={"gpu": "NVIDIA H100 80GB HBM3"},
                   gpu="NVIDIA H100 80GB HBM3", started_at=now, ended_at=now, duration_s=1.0)


def _finished(db, settings, uid: int, mode: str, code: str, passed: bool = True, secret_factor: float = 1.0) -> int:
    """A submission whose jobs an H100 worker claimed and completed with a recorded H100 ranked report."""
    report = json.loads(RANKED_REPORT.read_text())
    with db.write() as session:
        sub_id = service.create_submission(session, settings, uid, "histogram", "H100", mode, code, "k.py").id
    while (spec := queue.claim(db, WorkerCaps("gpu0", "H100"), settings, pair=False)) is not None:
        result = json.loads(json.dumps(report))
        if spec.secret:
            result["ranked"]["score_ms"] *= secret_factor
        assert queue.complete(db, spec, _outcome(passed, result), "gpu0", settings)
    return sub_id


def test_a_passing_ranked_run_queues_a_timed_suggestion_for_its_gpu_only(fresh):
    db, settings, uid = fresh
    sub_id = _finished(db, settings, uid, "ranked", TRITON_CODE)
    # A CPU worker and another GPU type never take it: it is timed on the leaderboard's GPU.
    assert suggestions.claim(db, "cpu", (), settings) is None
    assert suggestions.claim(db, "h200", ("H200",), settings) is None
    spec = suggestions.claim(db, "gpu0", ("H100",), settings)
    assert spec is not None and spec.submission_id == sub_id and spec.measure and spec.gpu_type == "H100"
    report = json.loads(RANKED_REPORT.read_text())
    assert [a[0] for a in spec.anchors] == [c["candidate"]["mean_ms"] for c in report["ranked"]["cases"]]
    assert "the leaderboard's ranked run #" in spec.anchors[0][1]
    cand = Candidate("grouped:GROUP_M=8", "pid = tl.program_id(0)\n", "bijection on grid 4x4", Figure(1.2, 0.9, 1.4),
                     [], "patched file\n", tests="passed")
    made = Suggestion(outcome="order", headline="order grouped:GROUP_M=8: predicted", model="H100-SXM", best=cand,
                      candidates=[cand])
    assert suggestions.complete(db, spec, made)
    assert not suggestions.complete(db, spec, made)  # one completion per claim
    with db.read() as session:
        sub = session.get(Submission, sub_id)
        view = suggestions.view(sub.suggestion)
        assert sub.score_ms == pytest.approx(report["ranked"]["score_ms"]) and not sub.flagged  # the verdict stands
        assert sub.suggestion.patched_code == "patched file\n" and "patched" not in json.dumps(sub.suggestion.result)
    assert view["status"] == "done" and view["order"]["spec"] == "grouped:GROUP_M=8" and not view["measured"]
    assert view["order"]["predicted"] == {"speedup": 1.2, "low": 0.9, "high": 1.4} and view["seconds"] >= 0


def test_only_trusted_passing_runs_get_one_and_a_code_without_a_site_gets_a_note(fresh):
    db, settings, uid = fresh
    flagged = _finished(db, settings, uid, "ranked", TRITON_CODE + "# 1\n", secret_factor=2.0)
    failed = _finished(db, settings, uid, "ranked", TRITON_CODE + "# 2\n", passed=False)
    tested = _finished(db, settings, uid, "test", TRITON_CODE + "# 3\n")
    torch_only = _finished(db, settings, uid, "ranked", "def custom_kernel(data):\n    return data['x'] * 1\n")
    with db.read() as session:
        assert session.get(Submission, flagged).flagged
        for sub_id in (flagged, failed, tested):
            assert session.get(Submission, sub_id).suggestion is None
        note = session.get(Submission, torch_only).suggestion
        assert note.status == SuggestionStatus.FAILED and note.note == suggestions.NO_SITE and not note.claimed_by
    assert suggestions.claim(db, "gpu0", ("H100",), settings) is None  # nothing for a worker to do


def test_a_lost_suggestion_is_claimed_again_then_given_up_as_a_note(fresh):
    db, settings, uid = fresh
    sub_id = _finished(db, settings, uid, "ranked", TRITON_CODE)
    first = suggestions.claim(db, "a", ("H100",), settings)
    assert first is not None and suggestions.heartbeat(db, first)
    assert suggestions.worker_lost(db, "a") == [first.suggestion_id]
    second = suggestions.claim(db, "b", ("H100",), settings)
    assert second is not None and second.attempt == 2 and not suggestions.heartbeat(db, first)
    suggestions.fail(db, second, "RuntimeError: the service's own failure", settings, retry=True)
    third = suggestions.claim(db, "b", ("H100",), settings)
    assert third is not None and third.attempt == 3
    suggestions.fail(db, third, "no suggestion: the site was not found", settings, retry=False)
    with db.read() as session:
        row = session.get(Submission, sub_id).suggestion
        assert row.status == SuggestionStatus.FAILED and row.note == "no suggestion: the site was not found"
    assert suggestions.claim(db, "b", ("H100",), settings) is None


def test_a_suggestion_gives_way_to_a_waiting_job_without_losing_a_claim(fresh):
    db, settings, uid = fresh
    _finished(db, settings, uid, "ranked", TRITON_CODE)
    spec = suggestions.claim(db, "gpu0", ("H100",), settings)
    assert spec is not None and spec.attempt == 1 and not queue.job_waiting(db, WorkerCaps("gpu0", "H100"))
    with db.write() as session:
        service.create_submission(session, settings, uid, "histogram", "H200", "ranked", "# another\n", "k.py")
    assert not queue.job_waiting(db, WorkerCaps("gpu0", "H100"))  # an H200 job is not this worker's
    with db.write() as session:
        service.create_submission(session, settings, uid, "histogram", "H100", "test", "# a test\n", "k.py")
    assert queue.job_waiting(db, WorkerCaps("gpu0", "H100")) and queue.job_waiting(db, WorkerCaps("cpu", None))
    cand = Candidate("row_major", "", "", Figure(1.1, 1.0, 1.2), [], "code\n")
    ask = Ask(task="matmul", cases=[], labels=["a"], target="h100", measure=True)
    with pytest.raises(SuggestYielded):  # before its first evaluator run
        measure(ask, "code\n", "k.py", [cand], Limits(), lambda text: None, should_yield=lambda: True)
    assert suggestions.yielded(db, spec)
    again = suggestions.claim(db, "gpu0", ("H100",), settings)
    assert again is not None and again.attempt == 1  # giving way did not count as a failed claim


# ---------------------------------------------------------------- the measured statistics


def _runs(scores: list[float]) -> list[dict]:
    return [{"score_ms": s, "cases_ms": [s, 2 * s]} for s in scores]


def test_measured_speedups_take_the_run_to_run_spread():
    own = _runs([2.0, 2.01])
    faster, same, noisy = _runs([1.6, 1.61]), _runs([2.005, 1.995]), _runs([1.7, 2.3])
    measured = compare_runs([own, faster, same], ["a", "b"], "GPU", ["faster", "same"])
    gain, tie = measured
    assert gain is not None and gain.score.low > 1.2 and gain.score.speedup == pytest.approx((2.0 * 2.01 / (1.6 * 1.61)) ** 0.5)
    assert tie is not None and tie.score.low < 1.0 < tie.score.high  # within noise: never a gain
    assert [c["case"] for c in gain.cases] == ["a", "b"] and gain.runs["pooled degrees of freedom"] == 3
    # One noisy file widens every interval (its spread is pooled): the same two means no longer resolve.
    wide = compare_runs([own, faster, noisy], ["a", "b"], "GPU", ["faster", "noisy"])[0]
    assert wide is not None and wide.score.high - wide.score.low > 5 * (gain.score.high - gain.score.low)
    # No run of the submission's own file: nothing to compare with.
    assert compare_runs([[], faster], ["a", "b"], "GPU", ["faster"]) == [None]


def _small(name: str, order: str | None = None) -> str:
    """A fixture matmul with 16x16x16 blocks (a 3x2 tile grid on matmul_small's case), its site optionally
    replaced by another order's lines."""
    code = (FIXTURES / name).read_text().replace("128", "16").replace("BLOCK_K=64", "BLOCK_K=16")
    if order is not None:
        site = "    pid_m = pid % num_pid_m\n    pid_n = (pid // num_pid_m + pid_m) % num_pid_n\n"
        assert site in code
        code = code.replace(site, order)
    return code


def test_an_idle_gpu_times_one_order_of_each_family_even_inside_the_models_noise():
    """No order predicted above the time model's noise: on a GPU the best-ranked order of each family is still
    timed (the model missed a 12% order effect on a 4096^3 matmul that the leaderboard measured, and 20% on
    matmul 16384^2 x 64), a second order of a family only where it is predicted to gain; without a GPU nothing is
    suggested. Ranking children get the memory they are given."""
    from swizzlelab.optimize.suggest import Ranking, _candidates, child_limits

    def order(spec: str, speedup: float) -> dict:
        return {"spec": spec, "formula": "pid_m = pid", "proof": "bijection", "speedup": speedup,
                "low": speedup * 0.9, "high": speedup * 1.1, "patched": "code\n",
                "cases": [{"case": "m=4096", "speedup": speedup, "low": speedup * 0.9, "high": speedup * 1.1,
                           "dram_bytes": 1e9}]}

    case = {"case": "m=4096", "grid": [32, 32], "trace": "t", "occupancy": "o", "time_model": "m", "anchor": "a",
            "stop_reason": "compute-bound", "noise": 0.04}
    ranking = Ranking(kernel="k", site="s", model="H200-SXM", noise=0.04, cases=[case], elapsed_s=1.0,
                      orders=[order("grouped:GROUP_M=8", 1.028), order("grouped:GROUP_M=4", 1.02),
                              order("column_major", 0.97), order("xcd:NUM_XCDS=8+column_major", 0.96)])
    assert _candidates(ranking, 2) == []
    assert [c.spec for c in _candidates(ranking, 6, spread=True)] == [
        "grouped:GROUP_M=8", "column_major", "xcd:NUM_XCDS=8+column_major"]
    assert [c.spec for c in _candidates(ranking, 2, spread=True)] == ["grouped:GROUP_M=8", "column_major"]
    gains = Ranking(**{**ranking.model_dump(), "orders": [order("grouped:GROUP_M=8", 1.2),
                                                           order("grouped:GROUP_M=4", 1.1), order("identity", 1.0)]})
    assert [c.spec for c in _candidates(gains, 6, spread=True)] == ["grouped:GROUP_M=8", "grouped:GROUP_M=4", "identity"]
    limits = Limits(compile_s=90, run_s=60)
    assert child_limits(limits, 600).host_mem_bytes == limits.host_mem_bytes
    assert child_limits(limits, 600, 64 << 30).host_mem_bytes == 64 << 30


def test_measure_times_own_and_orders_interleaved_through_the_evaluator():
    """The GPU path's flow on the CPU (interpreter wall times, labelled so): own file and each order in interleaved
    isolated ranked runs; an order whose file fails is dropped with a note and never measured."""
    row_major = "    pid_m = pid // num_pid_n\n    pid_n = pid % num_pid_n\n"
    wrong = "    pid_m = pid % num_pid_m\n    pid_n = pid * 0\n"  # computes one tile column only
    cands = [Candidate(spec, "", "", Figure(1.1, 1.0, 1.2), [], _small("matmul_diagonal.py", order))
             for spec, order in (("row_major", row_major), ("broken", wrong))]
    ask = Ask(task=str(SMALL_TASK), cases=[], labels=["m=48 n=32 k=32"], target="h100", measure=True, rounds=2,
              budget_s=0.2, cpu_timing=True)
    notes: list[str] = []
    device = measure(ask, _small("matmul_diagonal.py"), "sub.py", cands, Limits(compile_s=90, run_s=60), notes.append)
    good, broken = cands
    assert device.startswith("CPU (Triton interpreter") and good.passed and not broken.passed
    assert broken.measured is None and "failed in the evaluator" in broken.tests and len(notes) == 1
    assert "round 1: order broken failed" in notes[0]
    measured = good.measured
    assert measured is not None and measured.runs == {"own": 2, "row_major": 2, "pooled degrees of freedom": 2}
    assert measured.score.low < measured.score.speedup < measured.score.high and measured.gpu == device
    assert [c["case"] for c in measured.cases] == ["m=48 n=32 k=32"] and measured.cases[0]["own_ms"] > 0


def test_the_slower_half_of_the_orders_leaves_after_a_round():
    """Successive halving between rounds: ranked by their last run against the own file's, the slower half of the
    live orders is dropped with a note; one order is never dropped, nor one already gone."""
    from swizzlelab.optimize.suggest import _halved

    def run(ms: float) -> dict:
        return {"score_ms": ms, "cases_ms": [ms]}

    cands = [Candidate(spec, "", "", Figure(1.0, 0.9, 1.1), [], "code\n") for spec in ("a", "b", "c", "d", "e")]
    runs = [[run(10.0)], [run(8.0)], [run(12.0)], [run(9.0)], [run(11.0)], [run(7.0)]]
    notes: list[str] = []
    out = _halved(runs, set(), cands, notes.append)
    assert out == {2, 4} and len(notes) == 2 and "order b halved out after round 1: 0.833x" in notes[0]
    assert _halved(runs, {1, 2, 3, 4}, cands, notes.append) == set()


# ---------------------------------------------------------------- a real server and CPU worker


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`swizzlelab serve` with one CPU worker making predicted suggestions after test runs, ranked at the
    leaderboard's first benchmark case (matmul 4096^3)."""
    workdir = tmp_path_factory.mktemp("suggest")
    service_ = start_service(f"sqlite:///{workdir / 'leaderboard.db'}", workdir, "--workers", "1", "--suggest", "all",
                             "--suggest-cases", "1", "--suggest-screen-s", "8")
    try:
        with service_.client(ADMIN_TOKEN) as admin:
            service_.tokens = {name: admin.post("/api/users", json={"name": name}).json()["token"]  # type: ignore[attr-defined]
                               for name in ("alice", "bob")}
        yield service_
    finally:
        service_.stop()


def _cli(served, user: str, *args: str, timeout: float = 420):
    return swizzlelab(*args, "--server", served.url, "--token", served.tokens[user], timeout=timeout)


@pytest.fixture(scope="module")
def suggested(served):
    """alice's diagonal-order matmul submitted through `swizzlelab submit`, which waits for its suggestion."""
    done = _cli(served, "alice", "submit", "matmul", str(FIXTURES / "matmul_diagonal.py"), "--mode", "test",
                "--gpu", "H100", "--suggestion-wait", "400")
    assert done.returncode == 0, done.stdout + done.stderr + (served.workdir / "serve.log").read_text()[-4000:]
    with served.client(served.tokens["alice"]) as alice:
        sub_id = alice.get("/api/submissions").json()[0]["id"]
    return sub_id, done.stdout


def test_a_cpu_worker_makes_a_predicted_suggestion_that_submit_prints(served, suggested):
    sub_id, printed = suggested
    assert f"submission {sub_id}: passed" in printed
    assert f"## Suggestion for submission {sub_id}" in printed and "predicted (time model H100-SXM)" in printed
    assert "measured: not measured" in printed and not re.search(r"\]\s*measured", printed)  # never as measured
    with served.client(served.tokens["alice"]) as alice:
        view = alice.get(f"/api/submissions/{sub_id}/suggestion").json()
        patched = alice.get(f"/api/submissions/{sub_id}/suggestion/patched")
    assert view["status"] == "done" and view["outcome"] == "order", view
    assert not view["measured"] and view["gpu"] == "" and view["order"]["measured"] is None
    assert view["order"]["predicted"]["speedup"] > 1.0 + view["result"]["cases"][0]["noise"]
    assert view["order"]["proof"].startswith("bijection on grid 32x32")
    assert view["order"]["tests"] == "passed" and view["model"] == "H100-SXM"
    # The patched kernel is the submission's file with only the site's lines changed.
    original = (FIXTURES / "matmul_diagonal.py").read_text().splitlines()
    changed = [line for line in difflib.unified_diff(original, patched.text.splitlines(), lineterm="", n=0)
               if line.startswith("@@")]
    assert patched.headers["content-disposition"].endswith('filename="suggested_matmul_diagonal.py"')
    assert changed and all(int(h.split()[1].split(",")[0].lstrip("-")) in range(12, 18) for h in changed), changed


def test_the_suggestion_is_its_owners_and_the_admins_only(served, suggested, tmp_path):
    sub_id, _ = suggested
    with served.client(served.tokens["bob"]) as bob, served.client() as anonymous, \
            served.client(ADMIN_TOKEN) as admin:
        for path in (f"/api/submissions/{sub_id}/suggestion", f"/api/submissions/{sub_id}/suggestion/patched"):
            assert bob.get(path).status_code == 404 and bob.get(path).json()["detail"] == f"submission {sub_id} not found"
            assert anonymous.get(path).status_code == 401
            assert admin.get(path).status_code == 200
        assert bob.get(f"/submissions/{sub_id}/suggestion.py").status_code == 404
    out = tmp_path / "best.py"
    shown = _cli(served, "alice", "suggestion", str(sub_id), "--out", str(out))
    assert shown.returncode == 0 and "predicted (time model H100-SXM)" in shown.stdout and out.read_text().strip()
    refused = _cli(served, "bob", "suggestion", str(sub_id))
    assert refused.returncode == 2 and "404" in refused.stderr


def test_a_submission_without_a_program_id_gets_a_note(served):
    code = "import torch\n\n\ndef custom_kernel(data):\n    return torch.matmul(data['a'], data['b'], out=data['out'])\n"
    with served.client(served.tokens["alice"]) as alice:
        sub_id = alice.post("/api/submissions", json={"task": "matmul", "gpu_type": "H100", "mode": "test",
                                                      "code": code, "filename": "torch_mm.py"}).json()["id"]
        view = wait_for(lambda: (v := alice.get(f"/api/submissions/{sub_id}").json())["status"] == "done" and v,
                        240, "the torch submission's test run")
        note = alice.get(f"/api/submissions/{sub_id}/suggestion").json()
    assert view["passed"] and view["suggestion"]["status"] == "failed"
    assert note["status"] == "failed" and note["note"] == suggestions.NO_SITE and note["order"] is None


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_submission_page_shows_the_predicted_suggestion_to_its_owner_only(served, suggested):
    from playwright.sync_api import sync_playwright

    sub_id, _ = suggested
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            for user in ("alice", "bob"):
                page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                page.goto(f"{served.url}/login?next=/submissions/{sub_id}")
                page.fill("input[name=token]", served.tokens[user])
                page.click("#login-form button[type=submit]")
                page.wait_for_url(f"**/submissions/{sub_id}")
                if user == "bob":
                    assert page.locator("#suggestion").count() == 0 and page.locator("#private-note").is_visible()
                    continue
                assert "predicted" in page.inner_text("#suggested") and "measured on" not in page.inner_text("#suggested")
                assert "not measured" in page.inner_text("#suggestion-measured")
                assert page.inner_text("#suggestion-proof").startswith("bijection on grid 32x32")
                assert "time model H100-SXM" in page.inner_text("#suggestion-predicted")
                with page.expect_download() as download:
                    page.click("#suggestion-download")
                assert "tl.program_id(0)" in Path(download.value.path()).read_text()
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.locator("#suggestion").screenshot(path=str(ARTIFACTS / "suggestion-predicted.png"))
        finally:
            browser.close()
