"""Suggestions on a GPU: `swizzlelab serve --workers auto` (a worker per GPU), Triton submissions to the built-in
leaderboards in ranked mode, then each one's suggestion of a faster block order: predicted and measured speedups with
their intervals, and the seconds from the ranked result to the suggestion. One 600 s device call:

    python -m benchmarks.suggest.run --out $OUT

writes $OUT/suggest_<device>.json, the service's log $OUT/suggest_<device>.log, and a screenshot of a submission page
with a measured suggestion, $OUT/suggest_page_<device>.png (Chromium through Playwright; skipped, with the reason in
the JSON, where neither is installed). The submissions are tests/fixtures/suggest/*.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.lab.serve import serve_env, start, stop

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KERNELS = ROOT / "tests" / "fixtures" / "suggest"
ADMIN = "suggest-benchmark-admin"
# (user, task, file): the ones most likely to gain first, so a short call still measures them.
SUBMISSIONS = [
    ("alice", "histogram", "histogram_columns.py"),  # band-fastest: every channel group re-reads x
    ("erin", "flash_attention", "attention_mblock.py"),  # m-block major: each head's K/V re-read per query block
    ("bob", "matmul", "matmul_diagonal.py"),  # a skewed tile order: resident programs share no panel
    ("carol", "spmv", "spmv_rows.py"),  # launch order across communities (order matters; gathers)
    ("dave", "matmul", "matmul_row_major.py"),  # row-major tiles: little to gain below 8192^3
]
SERVE_OPTIONS = ["--eval-budget-s", "0.5", "--suggest", "ranked", "--suggest-cases", "1", "--suggest-top", "1",
                 "--suggest-rounds", "2", "--suggest-screen-s", "15"]


def _gpu() -> tuple[str, str]:
    """(the first visible GPU's name, the leaderboard GPU type it is) from nvidia-smi."""
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, check=True, timeout=30).stdout.split("\n")
    name = names[0].strip()
    kind = next((k for k in ("H200", "H100") if k in name.upper()), "")
    if not kind:
        raise SystemExit(f"GPU {name!r} is neither an H100 nor an H200: the built-in leaderboards are for those")
    return name, kind


def _summary(view: dict[str, Any] | None) -> dict[str, Any]:
    """The suggestion's figures for the JSON: predicted and measured speedups with their intervals, each labelled."""
    if view is None:
        return {"status": "not made within the call"}
    order = view.get("order") or {}
    return {
        "status": view["status"], "outcome": view["outcome"], "headline": view["headline"], "note": view["note"],
        "order": order.get("spec"), "formula": order.get("formula"), "proof": order.get("proof"),
        "predicted": {**order["predicted"], "kind": f"predicted (time model {view['model']})"}
        if order.get("predicted") else None,
        "measured": {**order["measured"], "kind": f"measured ({order['measured']['gpu']})"}
        if order.get("measured") else None,
        "shown_as_gain": view["outcome"] == "order",
        "seconds_result_to_suggestion": view["seconds"],
        "phases_s": (view.get("result") or {}).get("phases_s"),
        "candidates": [{"spec": c["spec"], "predicted": c["predicted"], "tests": c["tests"],
                        "measured": (c.get("measured") or {}).get("score")}
                       for c in (view.get("result") or {}).get("candidates", [])],
        "cases": [{k: c.get(k) for k in ("case", "grid", "trace", "occupancy", "time_model", "anchor", "stop_reason",
                                         "search")} for c in (view.get("result") or {}).get("cases", [])],
    }


def _screenshot(base: str, token: str, submission_id: int, path: Path) -> str:
    """A full-page screenshot of the submission's page as its owner sees it; '' or why not."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "playwright is not installed"
    chromium = "/usr/bin/chromium"
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=chromium if os.path.exists(chromium) else None,
                                         args=["--no-sandbox"])
        except Exception as err:  # no browser here: the JSON says so
            return f"chromium could not start: {str(err).splitlines()[0]}"
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.goto(f"{base}/login?next=/submissions/{submission_id}")
            page.fill("input[name=token]", token)
            page.click("#login-form button[type=submit]")
            page.wait_for_url(f"**/submissions/{submission_id}")
            page.locator("#suggestion").scroll_into_view_if_needed()
            page.screenshot(path=str(path), full_page=True)
            page.locator("#suggestion").screenshot(path=str(path.with_name(path.stem + "_section.png")))
        finally:
            browser.close()
    return ""


def page_from(db: Path, out: Path) -> None:
    """The screenshot of a GPU run's measured suggestion, taken where a browser is: its database served here
    (no worker), the owner's token from the side file, the submission the run's JSON names."""
    device = db.stem.removeprefix("suggest_")
    data = json.loads(db.with_name(f"suggest_{device}.json").read_text())
    tokens = json.loads(db.with_name(f"suggest_{device}_tokens.json").read_text())
    shown = next((s for s in data["submissions"] if s["suggestion"].get("shown_as_gain")), None)
    if shown is None:
        raise SystemExit(f"{db.name}: no suggestion of that run measured a gain: nothing to show")
    work = Path(tempfile.mkdtemp(prefix="swizzlelab-suggest-page-"))
    shutil.copyfile(db, work / "lb.db")  # serving may write (sessions): the run's own file stays as it came
    served = start(f"sqlite:///{work / 'lb.db'}", work, work / "serve.log", "--workers", "0", "--admin-token", ADMIN)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"suggest_page_{device}.png"
        why = _screenshot(served.base, tokens[str(shown["submission_id"])]["token"], shown["submission_id"], path)
    finally:
        stop(served.process)
    print(why or path)


def summarize(submissions: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The counts issue 48 asks for: suggestions made, measured gains outside noise (the whole interval above
    1), and suggestions shown as gains without one (must be 0)."""
    suggestions = [s["suggestion"] for s in submissions]
    gained = [bool(s.get("measured") and s["measured"]["low"] > 1.0) for s in suggestions]
    return {
        "submissions": len(submissions),
        "suggestions_made": sum(1 for s in suggestions if s.get("status") in ("done", "failed")),
        "measured_gains_outside_noise": sum(gained),
        # a suggestion shown as a gain must have measured one: never inside noise or slower
        "shown_as_gain_but_not_measured_faster": sum(1 for s, g in zip(suggestions, gained)
                                                     if s.get("shown_as_gain") and not g),
        "wall_s": wall_s,
    }


def merge(files: list[Path], out: Path) -> None:
    """One JSON of several calls on one device (each user once): submissions joined, each call's command, serve
    line and screenshot kept, the summary counted again over all."""
    loaded = [json.loads(f.read_text()) for f in files]
    devices = sorted({d["device"] for d in loaded})
    if len(devices) != 1:
        raise SystemExit(f"error: these files come from {len(devices)} devices ({', '.join(devices)}): "
                         "merge one device's")
    users = [s["user"] for d in loaded for s in d["submissions"]]
    if len(users) != len(set(users)):
        raise SystemExit(f"error: a user's submission appears in more than one call ({', '.join(users)})")
    order = [u for u, _, _ in SUBMISSIONS]
    submissions = sorted((dict(s, call=i) for i, d in enumerate(loaded) for s in d["submissions"]),
                         key=lambda s: order.index(s["user"]) if s["user"] in order else len(order))
    merged = {"script": loaded[0]["script"], "device": devices[0],
              "calls": [{k: d.get(k) for k in ("command", "serve", "screenshot")} | {"file": f.name,
                        "wall_s": d["summary"]["wall_s"]} for f, d in zip(files, loaded)],
              "submissions": submissions,
              "summary": summarize(submissions, sum(d["summary"]["wall_s"] for d in loaded))}
    out.write_text(json.dumps(merged, indent=1) + "\n")
    print(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON, the log and the screenshot")
    parser.add_argument("--timeout-s", type=float, default=560.0, help="stop waiting (and write what came) after this")
    parser.add_argument("--serve-option", action="append", default=[], help="more `swizzlelab serve` options")
    parser.add_argument("--only", action="append", choices=[u for u, _, _ in SUBMISSIONS],
                        help="submit only these users' kernels (repeatable; a one-GPU call cannot make all five)")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these calls' suggest_<device>.json (one device, "
                        "each user once) into --out, a file")
    parser.add_argument("--page-from", type=Path, help="a run's suggest_<device>.db: serve it here and take the "
                        "page's screenshot into --out (for a GPU machine without a browser)")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    if args.page_from:
        return page_from(args.page_from, args.out)
    started = time.monotonic()
    gpu_name, kind = _gpu()
    device = re.sub(r"[^a-z0-9]+", "-", kind.lower())
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="swizzlelab-suggest-"))
    log_path = args.out / f"suggest_{device}.log"
    served = start(f"sqlite:///{work / 'lb.db'}", work, log_path, "--workers", "auto", "--admin-token", ADMIN,
                   *SERVE_OPTIONS, *args.serve_option, env=serve_env(compiled=True))
    base, command = served.base, served.command
    out: dict[str, Any] = {"script": "benchmarks/suggest/run.py",
                           "command": "python -m benchmarks.suggest.run " + shlex.join(sys.argv[1:]),
                           "device": gpu_name, "serve": " ".join(command[2:]), "submissions": []}
    rows: list[dict[str, Any]] = []
    try:
        admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        while kind not in admin.get("/api/health").json()["workers"]["gpu_types"]:  # the GPU worker announced itself
            if time.monotonic() - started > 180:
                raise SystemExit("no GPU worker connected within 180 s")
            time.sleep(1.0)
        for user, task, file in (s for s in SUBMISSIONS if not args.only or s[0] in args.only):
            token = admin.post("/api/users", json={"name": user}).json()["token"]
            client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            sent = client.post("/api/submissions", json={"task": task, "gpu_type": kind, "mode": "ranked",
                                                         "code": (KERNELS / file).read_text(), "filename": file})
            sent.raise_for_status()
            rows.append({"user": user, "task": task, "file": file, "token": token, "client": client,
                         "id": sent.json()["id"], "submitted": time.monotonic(), "view": None, "suggestion": None})
        deadline = started + args.timeout_s
        while time.monotonic() < deadline:
            for row in rows:
                if row["view"] is None or row["view"]["status"] not in ("done", "error", "cancelled"):
                    row["view"] = row["client"].get(f"/api/submissions/{row['id']}").json()
                    if row["view"]["status"] in ("done", "error", "cancelled"):
                        row["result_s"] = time.monotonic() - row["submitted"]
                state = row["view"].get("suggestion")
                if state and (row["suggestion"] is None or row["suggestion"]["status"] in ("queued", "running")):
                    row["suggestion"] = row["client"].get(f"/api/submissions/{row['id']}/suggestion").json()
            if all(r["view"]["status"] in ("done", "error", "cancelled") and
                   (not r["view"].get("suggestion") or r["suggestion"]["status"] in ("done", "failed")) for r in rows):
                break
            time.sleep(2.0)
        for row in rows:
            view = row["view"] or {}
            out["submissions"].append({
                "user": row["user"], "task": row["task"], "file": f"tests/fixtures/suggest/{row['file']}",
                "submission_id": row["id"], "status": view.get("status"), "passed": view.get("passed"),
                "flagged": view.get("flagged"), "score_ms": view.get("score_ms"),
                "score_kind": f"measured ({gpu_name})", "submit_to_result_s": row.get("result_s"),
                "suggestion": _summary(row["suggestion"]) if view.get("suggestion") else {"status": "none queued"},
            })
        shown = next((r for r in rows if r["suggestion"] and r["suggestion"].get("measured")
                      and r["suggestion"]["outcome"] == "order"), None) or \
            next((r for r in rows if r["suggestion"] and r["suggestion"].get("measured")), None)
        if shown is not None:
            path = args.out / f"suggest_page_{device}.png"
            why = _screenshot(base, shown["token"], shown["id"], path)
            out["screenshot"] = {"submission_id": shown["id"], "path": path.name} if not why else {"not taken": why}
        else:
            out["screenshot"] = {"not taken": "no suggestion was measured within the call"}
    finally:
        stop(served.process)
        # The database (raw data, out of git) serves the same pages elsewhere when this machine has no browser:
        # `swizzlelab serve --db sqlite:///suggest_<device>.db --workers 0` and the owner's token from the side file.
        if (work / "lb.db").is_file():
            # SQLite's backup, not a file copy: rows still in the write-ahead log (lb.db-wal) come along
            with sqlite3.connect(work / "lb.db") as source, sqlite3.connect(args.out / f"suggest_{device}.db") as copy:
                source.backup(copy)
            (args.out / f"suggest_{device}_tokens.json").write_text(json.dumps(
                {str(r["id"]): {"user": r["user"], "token": r["token"]} for r in rows}))
    out["summary"] = summarize(out["submissions"], time.monotonic() - started)
    (args.out / f"suggest_{device}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
