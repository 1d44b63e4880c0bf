"""Submit-to-result of honest ranked submissions on an idle leaderboard: `swizzlelab serve --workers auto` on a GPU
machine, one submission at a time, each timed from its POST until its result (public and secret run) is stored.

    python -m benchmarks.ranked_speed.run --out $OUT/ranked_speed_<device>.json

Records per submission the submit-to-result seconds, each run's duration and phases (where the time goes), and
whether the worker had to time the library rows or kept them from an earlier submission.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.lab.serve import start, stop

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KERNELS = ROOT / "benchmarks" / "leaderboard_h100" / "kernels"
ADMIN = "ranked-speed-admin"
# (user, file, edit): an edit makes new code (no Triton cache of its own) with the same kernel.
QUEUE = [
    ("bob", KERNELS / "channel_histogram.py", ""),
    ("alice", KERNELS / "task_triton.py", ""),
    ("erin", KERNELS / "torch_bincount.py", ""),
    ("bob", KERNELS / "channel_histogram.py", "\n# resubmitted: new code, same kernel\n"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout-s", type=float, default=500)
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="swizzlelab-ranked-speed-"))
    served = start(f"sqlite:///{work / 'lb.db'}", work, work / "serve.log", "--workers", "auto", "--admin-token", ADMIN)
    base = served.base
    out: dict = {"script": "benchmarks/ranked_speed/run.py", "command": "python -m benchmarks.ranked_speed.run " +
                 " ".join(shlex.quote(a) for a in sys.argv[1:]), "settings": "serve's defaults"}
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.strip().splitlines()
        gpu_type = "H200" if "H200" in gpus[0] else "H100"
        while time.monotonic() - started < 180:
            if gpu_type in httpx.get(base + "/api/health", timeout=5).json()["workers"]["gpu_types"]:
                break
            time.sleep(0.5)
        out["worker_ready_s"] = time.monotonic() - started
        # A worker that has been idle a while has timed the library rows ahead; wait for that (a user of a running
        # leaderboard meets such a worker), and record how long it took.
        while time.monotonic() - started < 240 and "library row(s) of histogram" not in (work / "serve.log").read_text():
            time.sleep(0.5)
        out["library_ahead_done_s"] = time.monotonic() - started
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as admin:
            tokens = {user: admin.post("/api/users", json={"name": user}).json()["token"]
                      for user in sorted({q[0] for q in QUEUE})}
        results = []
        for user, path, edit in QUEUE:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens[user]}"}, timeout=30) as http:
                t0 = time.monotonic()
                view = http.post("/api/submissions", json={"task": "histogram", "gpu_type": gpu_type, "mode": "ranked",
                                                          "code": path.read_text() + edit, "filename": path.name}).json()
                sub_id = view["id"]
                while view.get("status") not in ("done", "error") and time.monotonic() - started < args.timeout_s:
                    time.sleep(0.1)
                    view = http.get(f"/api/submissions/{sub_id}").json()
                took = time.monotonic() - t0
                runs = [http.get(f"/api/runs/{r['id']}").json() for r in view.get("runs", [])]
            isolation = [((r.get("result") or {}).get("isolation") or {}) for r in runs]
            results.append({
                "user": user, "file": str(path.relative_to(ROOT)), "resubmitted": bool(edit), "submission_id": sub_id,
                "status": view.get("status"), "passed": view.get("passed"), "flagged": view.get("flagged"),
                "flag_reason": view.get("flag_reason"), "score_ms": view.get("score_ms"),
                "submit_to_result_s": took, "runs": len(runs),
                "run_durations_s": {("secret" if r.get("secret") else "public"): r.get("duration_s") for r in runs},
                "secret_score_ms": next((r.get("score_ms") for r in runs if r.get("secret")), None),
                "phases_s": {("secret" if r.get("secret") else "public"): i.get("phases_s") for r, i in zip(runs, isolation)},
                "library_rows": next((i.get("library_rows") for i in isolation if i.get("library_rows")), None),
                "measured_on": runs[0].get("gpu") if runs else None,
            })
            print(f"{user:6s} {path.name:24s} -> {view.get('status')} passed={view.get('passed')} flagged="
                  f"{view.get('flagged')} {took:.1f} s", flush=True)
        out.update({"device": next((r["measured_on"] for r in results if r["measured_on"]), None), "nvidia_smi": gpus,
                    "submissions": results, "total_s": time.monotonic() - started,
                    "max_submit_to_result_s": max(r["submit_to_result_s"] for r in results),
                    "all_passed": all(r["passed"] and not r["flagged"] for r in results)})
    finally:
        stop(served.process)
        out["serve_log_tail"] = (work / "serve.log").read_text()[-4000:]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(json.dumps({k: out.get(k) for k in ("device", "all_passed", "max_submit_to_result_s", "total_s")}, indent=1))


if __name__ == "__main__":
    main()
