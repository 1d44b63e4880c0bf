"""The leaderboard under hostile load on a GPU: `swizzlelab serve --workers auto`, a queue of honest and hostile
submissions (one signals its parent, one kills every process it may, one spins the GPU, one forks, one reads host
secrets), and a worker killed from outside mid-job. Records each submission's verdict and submit-to-result time,
the runs per job (nothing lost, nothing duplicated), the isolated runs' phase times, and whether the server and its
workers are alive at the end.

    python -m benchmarks.chaos.run --out $OUT/chaos_h100.json

`--mode-honest test` on a CPU is a dry run of the flow (the Triton interpreter); its output is not a GPU result.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.lab.serve import start, stop

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUITE = ROOT / "tests" / "fixtures" / "submissions"
KERNELS = ROOT / "benchmarks" / "leaderboard_h100" / "kernels"
ADMIN = "chaos-bench-admin"
# (user, task, mode, file, kind): kind "honest" must pass; "contained" attacks compute honestly and must pass with
# nothing leaked; "hostile" must fail with a reason.
QUEUE = [
    ("alice", "histogram", "ranked", KERNELS / "task_triton.py", "honest"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "kill_parent.py", "contained"),
    ("bob", "histogram", "ranked", KERNELS / "channel_histogram.py", "honest"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "spin_gpu_kernel.py", "hostile"),
    ("carol", "matmul", "test", SUITE / "honest" / "triton_kernel.py", "honest"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "fork_bomb.py", "hostile"),
    ("trudy", "matmul", "test", SUITE / "wrong" / "kill_everything.py", "contained"),
    ("trudy", "matmul", "test", SUITE / "wrong" / "read_host_secrets.py", "contained"),
    ("dave", "matmul", "test", SUITE / "honest" / "torch_matmul.py", "honest"),
]
KILL_DURING = 2  # the queue index whose job the worker is killed (SIGKILL, from outside) in the middle of


def _workers_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    argv = handle.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid and b"worker" in argv:
                found.append(int(entry))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--eval-budget-s", type=float, default=0.5)
    parser.add_argument("--compile-s", type=float, default=45.0)
    parser.add_argument("--mode-honest", default="", help="override the honest submissions' mode (test: CPU dry run)")
    parser.add_argument("--timeout-s", type=float, default=540)
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="swizzlelab-chaos-"))
    served = start(f"sqlite:///{work / 'lb.db'}", work, work / "serve.log", "--workers", "auto", "--admin-token", ADMIN,
                   "--eval-budget-s", str(args.eval_budget_s), "--compile-s", str(args.compile_s),
                   "--heartbeat-timeout", "10")
    base, server = served.base, served.process
    out: dict = {"script": "benchmarks/chaos/run.py", "command": "python -m benchmarks.chaos.run " +
                 " ".join(shlex.quote(a) for a in sys.argv[1:])}
    try:
        try:
            gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True).stdout.strip().splitlines()
        except OSError:
            gpus = []  # a CPU dry run
        gpu_type = "H200" if gpus and "H200" in gpus[0] else "H100"
        # GPU submissions are refused (409) until a worker of that type has announced itself: wait for it.
        while time.monotonic() - started < 180:
            workers = httpx.get(base + "/api/health", timeout=5).json()["workers"]
            if (gpu_type in workers["gpu_types"]) if gpus else workers["connected"]:
                break
            time.sleep(0.5)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as admin:
            tokens = {user: admin.post("/api/users", json={"name": user}).json()["token"]
                      for user in sorted({q[0] for q in QUEUE})}
        posted = []
        for user, task, mode, path, kind in QUEUE:
            if kind == "honest" and args.mode_honest:
                mode = args.mode_honest
            view = httpx.post(f"{base}/api/submissions", headers={"Authorization": f"Bearer {tokens[user]}"},
                              timeout=30, json={"task": task, "gpu_type": gpu_type, "mode": mode,
                                                "code": path.read_text(), "filename": path.name}).json()
            posted.append((time.monotonic(), view["id"], user, task, mode, path, kind))
        # Chaos from outside: once the chosen submission's job runs, its worker is killed with SIGKILL.
        killed: dict = {}

        def kill_mid_job() -> None:
            sub_id, user = posted[KILL_DURING][1], posted[KILL_DURING][2]
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens[user]}"}, timeout=30) as http:
                while time.monotonic() - started < args.timeout_s:
                    if http.get(f"/api/submissions/{sub_id}").json().get("status") == "running":
                        time.sleep(4)
                        pids = _workers_of(server.pid)
                        if pids:
                            os.kill(pids[0], signal.SIGKILL)
                            killed.update(pid=pids[0], submission=sub_id, at_s=time.monotonic() - started)
                        return
                    time.sleep(0.2)

        killer = threading.Thread(target=kill_mid_job)
        killer.start()
        results = []
        for t0, sub_id, user, task, mode, path, kind in posted:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tokens[user]}"}, timeout=30) as http:
                view = http.get(f"/api/submissions/{sub_id}").json()
                while view.get("status") not in ("done", "error") and time.monotonic() - started < args.timeout_s:
                    time.sleep(0.25)
                    view = http.get(f"/api/submissions/{sub_id}").json()
                runs = [http.get(f"/api/runs/{r['id']}").json() for r in view.get("runs", [])]
            jobs_expected = 2 if mode == "ranked" else 1
            leaked = any("LEAKED" in (r.get("stdout_tail") or "") for r in runs)
            ok = {"honest": view.get("passed") is True, "contained": view.get("passed") is True and not leaked,
                  "hostile": view.get("passed") is False}[kind]
            results.append({
                "user": user, "task": task, "mode": mode, "file": str(path.relative_to(ROOT)), "kind": kind,
                "submission_id": sub_id, "status": view.get("status"), "passed": view.get("passed"),
                "score_ms": view.get("score_ms"), "flagged": view.get("flagged"),
                "reason": next((r.get("reason") for r in runs if r.get("reason")), view.get("error") or ""),
                "submit_to_result_s": time.monotonic() - t0, "runs": len(runs), "jobs_expected": jobs_expected,
                "exactly_once": len(runs) == jobs_expected, "leaked": leaked, "as_expected": ok,
                "run_durations_s": {("secret" if r.get("secret") else "public"): r.get("duration_s") for r in runs},
                "phases_s": {("secret" if r.get("secret") else "public"): ((r.get("result") or {}).get("isolation")
                                                                           or {}).get("phases_s") for r in runs},
                "sandbox": ((runs[0].get("result") or {}).get("isolation") or {}).get("sandbox") if runs else None,
                "measured_on": runs[0].get("gpu") if runs else None,
            })
            print(f"{user:8s} {path.name:24s} {mode:7s} {kind:9s} -> {view.get('status')} passed={view.get('passed')} "
                  f"runs={len(runs)} {results[-1]['submit_to_result_s']:.1f}s {results[-1]['reason'][:90]}", flush=True)
        killer.join(timeout=5)
        alive_workers = _workers_of(server.pid)
        log_text = (work / "serve.log").read_text()
        out.update({
            "device": next((r["measured_on"] for r in results if r["measured_on"]), None), "nvidia_smi": gpus,
            "eval_budget_s_per_case": args.eval_budget_s, "compile_s": args.compile_s,
            "submissions": results, "worker_killed_from_outside": killed,
            "server_alive_at_end": server.poll() is None and httpx.get(base + "/api/health", timeout=5).status_code == 200,
            "workers_alive_at_end": len(alive_workers),
            "worker_restarts_logged": log_text.count("started again"),
            "all_as_expected": all(r["as_expected"] for r in results),
            "nothing_lost_or_duplicated": all(r["exactly_once"] and r["status"] == "done" for r in results),
            "total_s": time.monotonic() - started,
        })
    finally:
        stop(server)
        out["serve_log_tail"] = (work / "serve.log").read_text()[-6000:]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(json.dumps({k: out.get(k) for k in ("device", "all_as_expected", "nothing_lost_or_duplicated",
                                              "server_alive_at_end", "workers_alive_at_end", "total_s")}, indent=1))


if __name__ == "__main__":
    main()
