"""The leaderboard under hostile load: `swizzlelab serve --workers auto` on SQLite or Postgres, a queue of honest and
hostile submissions (one signals its parent, one kills every process it may, one spins the GPU, one forks without
end, one fills its disk, two its memory (in one process, in eight), one reads host secrets, one tries to outlive its
evaluator, two print NUL bytes and terminal escapes), a worker killed from outside mid-job; then serve itself ended mid-job each way (Ctrl-C,
SIGTERM, SIGKILL of its process group), started again, and an honest submission after each. Records each
submission's verdict and submit-to-result time, the runs per job (nothing lost, nothing duplicated), the processes of
an evaluation alive after its worker or the service ended (must be 0), what the next serve swept, and whether the
server and its workers are alive at the end.

    python -m benchmarks.chaos.run --mode-honest test --compile-s 30 --eval-budget-s 0.3 --out $OUT/chaos_gpu.json
    python -m benchmarks.chaos.run --db postgres --mode-honest test --compile-s 60 --host-mem-gib 4 \
        --out benchmarks/chaos/chaos_cpu.json                                                  # on a CPU

`--mode-honest test` runs the honest submissions in test mode (on a CPU: the Triton interpreter; its times are not
GPU results).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.lab import postgres
from benchmarks.lab.serve import Served, processes_with_argument, start, stop, workers_of
from swizzlelab.harness.isolate import reaper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUITE = ROOT / "tests" / "fixtures" / "submissions"
KERNELS = ROOT / "benchmarks" / "leaderboard_h100" / "kernels"
ADMIN = "chaos-bench-admin"
# (user, task, mode, file, kind, words): kind "honest" must pass; "contained" attacks compute honestly and must pass
# with nothing leaked; "hostile" must fail with a reason holding `words` (the limit it broke named).
QUEUE = [
    ("alice", "histogram", "ranked", KERNELS / "task_triton.py", "honest", ""),
    ("mallory", "matmul", "test", SUITE / "wrong" / "kill_parent.py", "contained", ""),
    ("bob", "histogram", "ranked", KERNELS / "channel_histogram.py", "honest", ""),
    ("bob", "matmul", "test", SUITE / "honest" / "slow_first_call.py", "honest", ""),
    ("mallory", "matmul", "test", SUITE / "wrong" / "spin_gpu_kernel.py", "hostile", "timed out"),
    ("carol", "matmul", "test", SUITE / "honest" / "triton_kernel.py", "honest", ""),
    ("mallory", "matmul", "test", SUITE / "wrong" / "fork_bomb.py", "hostile", "process limit"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "fill_disk.py", "hostile", "disk quota"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "huge_host_memory.py", "hostile", "host memory limit"),
    ("mallory", "matmul", "test", SUITE / "wrong" / "memory_across_processes.py", "hostile", "host memory limit"),
    ("trudy", "matmul", "test", SUITE / "wrong" / "kill_everything.py", "contained", ""),
    ("trudy", "matmul", "test", SUITE / "wrong" / "read_host_secrets.py", "contained", ""),
    ("trudy", "matmul", "test", SUITE / "wrong" / "outlive_evaluator.py", "contained", ""),
    ("trudy", "matmul", "test", SUITE / "wrong" / "terminal_escapes.py", "hostile", "RuntimeError"),
    ("erin", "matmul", "test", SUITE / "honest" / "prints_nul.py", "honest", ""),
    ("dave", "matmul", "test", SUITE / "honest" / "torch_matmul.py", "honest", ""),
]
# The queue index whose job the worker is killed (SIGKILL, from outside) in the middle of: its first call sleeps 15 s.
KILL_DURING = 3
ENDINGS = ("SIGINT", "SIGTERM", "SIGKILL of the process group")  # how serve is ended mid-job after the queue
SETTLE_S = 10.0  # an evaluation's processes must be gone this long after its worker or the service ended
SLEEPER_S = 40  # the sleeping submission's first call: serve is ended during it


def orphans(workers: list[int], mark: str = "") -> list[int]:
    """Processes of an evaluation still alive once its workers are gone: every process still running the sandbox's
    program for one of `workers`, and a submission's own `sleep MARK`, SETTLE_S after they ended."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        left = [pid for pid, parent in reaper.sandboxed_processes().items() if parent in workers]
        left += processes_with_argument(mark) if mark else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _folders(pids: list[int]) -> int:
    return sum(len(list(Path(tempfile.gettempdir()).glob(f"swizzlelab-isolate-{pid}-*"))) for pid in pids)


class Chaos:
    """One study run: the service, its users, and what was recorded."""

    def __init__(self, args: argparse.Namespace, db_url: str, work: Path) -> None:
        self.args, self.db_url, self.work = args, db_url, work
        self.started = time.monotonic()
        self.served: Served | None = None
        self.logs: list[Path] = []  # one per start of serve
        self.sandbox: dict = {}
        self.tokens: dict[str, str] = {}
        self.gpus = self._gpus()
        self.gpu_type = "H200" if self.gpus and "H200" in self.gpus[0] else "H100"

    @staticmethod
    def _gpus() -> list[str]:
        try:
            return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True).stdout.strip().splitlines()
        except OSError:
            return []  # a CPU run

    def serve(self) -> Served:
        """(Re)start serve on the same database, with the limits the breaches are to hit."""
        a = self.args
        self.logs.append(self.work / f"serve-{len(self.logs) + 1}.log")
        self.served = start(self.db_url, self.work, self.logs[-1], "--workers", "auto", "--admin-token",
                            ADMIN, "--eval-budget-s", str(a.eval_budget_s), "--compile-s", str(a.compile_s),
                            "--heartbeat-timeout", "10", "--host-mem-gib", str(a.host_mem_gib), "--disk-gib",
                            str(a.disk_gib))
        return self.served

    def log_text(self, last_only: bool = False) -> str:
        return "".join(log.read_text(errors="replace") for log in (self.logs[-1:] if last_only else self.logs))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def client(self, user: str) -> httpx.Client:
        assert self.served is not None
        token = ADMIN if user == "admin" else self.tokens[user]
        return httpx.Client(base_url=self.served.base, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def submit(self, user: str, task: str, mode: str, path: Path, code: str | None = None) -> int:
        with self.client(user) as http:
            answer = http.post("/api/submissions", json={"task": task, "gpu_type": self.gpu_type, "mode": mode,
                                                         "code": code or path.read_text(), "filename": path.name})
        if answer.status_code != 201:
            raise SystemExit(f"submission refused: {answer.status_code} {answer.text[:300]}")
        return int(answer.json()["id"])

    def finished(self, user: str, sub_id: int) -> tuple[dict, list[dict]]:
        with self.client(user) as http:
            view = http.get(f"/api/submissions/{sub_id}").json()
            while view.get("status") not in ("done", "error", "cancelled") and self.elapsed() < self.args.timeout_s:
                time.sleep(0.25)
                view = http.get(f"/api/submissions/{sub_id}").json()
            return view, [http.get(f"/api/runs/{r['id']}").json() for r in view.get("runs", [])]

    def wait_running(self, user: str, sub_id: int, mark: str = "") -> bool:
        with self.client(user) as http:
            while self.elapsed() < self.args.timeout_s:
                running = http.get(f"/api/submissions/{sub_id}").json().get("status") == "running"
                if running and (not mark or processes_with_argument(mark)):
                    return True
                time.sleep(0.2)
        return False


def _record(chaos: Chaos, posted: tuple, view: dict, runs: list[dict]) -> dict:
    t0, sub_id, user, task, mode, path, kind, words = posted
    leaked = any("LEAKED" in (r.get("stdout_tail") or "") for r in runs)
    reason = next((r.get("reason") for r in runs if r.get("reason")), view.get("error") or "")
    ok = {"honest": view.get("passed") is True, "contained": view.get("passed") is True and not leaked,
          "hostile": view.get("passed") is False and words in reason}[kind]
    jobs_expected = 2 if mode == "ranked" else 1
    return {
        "user": user, "task": task, "mode": mode, "file": str(path.relative_to(ROOT)), "kind": kind,
        "reason_names": words, "submission_id": sub_id, "status": view.get("status"), "passed": view.get("passed"),
        "score_ms": view.get("score_ms"), "flagged": view.get("flagged"), "reason": reason,
        "submit_to_result_s": time.monotonic() - t0, "runs": len(runs), "jobs_expected": jobs_expected,
        "exactly_once": len(runs) == jobs_expected, "leaked": leaked, "as_expected": ok,
        "run_durations_s": {("secret" if r.get("secret") else "public"): r.get("duration_s") for r in runs},
        "phases_s": {("secret" if r.get("secret") else "public"): ((r.get("result") or {}).get("isolation")
                                                                   or {}).get("phases_s") for r in runs},
        "sandbox_applied": len((((runs[0].get("result") or {}).get("isolation") or {}).get("sandbox") or {})
                               .get("applied", [])) if runs else 0,
        "measured_on": runs[0].get("gpu") if runs else None,
    }


def run_queue(chaos: Chaos) -> tuple[list[dict], dict]:
    """The queue, with the worker SIGKILLed from outside in the middle of one job; every submission's record and
    what the kill left."""
    posted = []
    for user, task, mode, path, kind, words in QUEUE:
        if kind == "honest" and chaos.args.mode_honest:
            mode = chaos.args.mode_honest
        posted.append((time.monotonic(), chaos.submit(user, task, mode, path), user, task, mode, path, kind, words))
    killed: dict = {}

    def kill_mid_job() -> None:
        sub_id, user = posted[KILL_DURING][1], posted[KILL_DURING][2]
        if chaos.wait_running(user, sub_id):
            time.sleep(4)
            assert chaos.served is not None
            pids = workers_of(chaos.served.process.pid)
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.update(pid=pids[0], submission=sub_id, at_s=chaos.elapsed())
                killed["orphans"] = len(orphans(pids))

    killer = threading.Thread(target=kill_mid_job)
    killer.start()
    results = []
    for item in posted:
        view, runs = chaos.finished(item[2], item[1])
        results.append(_record(chaos, item, view, runs))
        if runs and not chaos.sandbox:
            chaos.sandbox = ((runs[0].get("result") or {}).get("isolation") or {}).get("sandbox") or {}
        row = results[-1]
        print(f"{row['user']:8s} {Path(row['file']).name:24s} {row['mode']:7s} {row['kind']:9s} -> {row['status']} "
              f"passed={row['passed']} runs={row['runs']} {row['submit_to_result_s']:.1f}s {row['reason'][:90]!r}",
              flush=True)
    killer.join(timeout=5)
    return results, killed


def _end_serve(served: Served, how: str) -> None:
    if how == "SIGKILL of the process group":
        os.killpg(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=30)
        return
    os.killpg(served.process.pid, signal.SIGINT if how == "SIGINT" else signal.SIGTERM)
    try:
        served.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        stop(served.process)


def end_serve_mid_job(chaos: Chaos, how: str) -> dict:
    """A submission that starts a `sleep` of its own and sleeps in every call; once it runs, serve is ended `how`;
    then the processes of the evaluation left, serve started again (what it swept), and an honest submission."""
    mark = f"{random.randrange(10**6, 10**7)}.5"
    # The first call sleeps (serve is ended meanwhile); should the job run again, it fails fast after that.
    sleeper = ("import subprocess\nimport time\n\nsubprocess.Popen(['sleep', '" + mark + "'])\n_calls = []\n\n\n"
               "def custom_kernel(data):\n    _calls.append(1)\n    if len(_calls) == 1:\n        time.sleep(SLEEP_S)\n"
               "    return None\n").replace("SLEEP_S", str(SLEEPER_S))
    sub_id = chaos.submit("mallory", "matmul", "test", Path("sleeper.py"), sleeper)
    running = chaos.wait_running("mallory", sub_id, mark)
    assert chaos.served is not None
    workers = workers_of(chaos.served.process.pid)
    t0 = time.monotonic()
    _end_serve(chaos.served, how)
    ended_s = time.monotonic() - t0
    left = orphans(workers, mark)
    folders_before = _folders(workers)
    chaos.serve()
    swept = chaos.log_text(last_only=True)
    with chaos.client("mallory") as http:  # given back to the queue by a stopping worker: not to run again
        http.post(f"/api/submissions/{sub_id}/cancel", json={})
    honest = SUITE / "honest" / "triton_kernel.py"
    t1 = time.monotonic()
    view, _ = chaos.finished("carol", chaos.submit("carol", "matmul", "test", honest))
    row = {"how": how, "evaluation_was_running": running, "serve_ended_in_s": ended_s,
           "orphan_processes": len(left), "folders_left_behind": folders_before,
           "folders_after_restart": _folders(workers),
           "sweep_logged": next((line for line in swept.splitlines() if "swept" in line), ""),
           "honest_after_passed": view.get("passed") is True, "honest_after_s": time.monotonic() - t1}
    print(f"serve ended by {how}: {row['orphan_processes']} orphan process(es), {folders_before} folder(s) left, "
          f"{row['folders_after_restart']} after the restart; honest submission after: "
          f"{'passed' if row['honest_after_passed'] else 'NOT passed'}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--eval-budget-s", type=float, default=0.5)
    parser.add_argument("--compile-s", type=float, default=45.0)
    parser.add_argument("--host-mem-gib", type=float, default=8.0, help="an evaluation's memory (the breach's limit; "
                        "a GPU child holds 2-3 GiB with CUDA up)")
    parser.add_argument("--disk-gib", type=float, default=1.0, help="an evaluation's disk quota (the breach's limit)")
    parser.add_argument("--mode-honest", default="", help="override the honest submissions' mode (test: CPU dry run)")
    parser.add_argument("--timeout-s", type=float, default=900)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="swizzlelab-chaos-"))
    cluster = postgres.start() if args.db == "postgres" else None
    db_url = cluster.new_database() if cluster else f"sqlite:///{work / 'lb.db'}"
    chaos = Chaos(args, db_url, work)
    out: dict = {"script": "benchmarks/chaos/run.py", "command": "python -m benchmarks.chaos.run " +
                 " ".join(shlex.quote(a) for a in sys.argv[1:]), "database": args.db}
    try:
        served = chaos.serve()
        while chaos.elapsed() < 180:  # GPU submissions wait while serve's GPU worker comes up; test ones need one
            if httpx.get(served.base + "/api/health", timeout=5).json()["workers"]["connected"]:
                break
            time.sleep(0.5)
        with chaos.client("admin") as admin:
            chaos.tokens = {user: admin.post("/api/users", json={"name": user}).json()["token"]
                            for user in sorted({q[0] for q in QUEUE} | {"carol", "mallory"})}
        results, killed = run_queue(chaos)
        endings = [end_serve_mid_job(chaos, how) for how in ENDINGS]
        assert chaos.served is not None
        alive_workers = workers_of(chaos.served.process.pid)
        log_text = chaos.log_text()
        out.update({
            "device": next((r["measured_on"] for r in results if r["measured_on"]), None), "nvidia_smi": chaos.gpus,
            "sandbox": chaos.sandbox,  # what the first run applied and skipped (each run's count is in its row)
            "eval_budget_s_per_case": args.eval_budget_s, "compile_s": args.compile_s,
            "host_mem_gib": args.host_mem_gib, "disk_gib": args.disk_gib,
            "submissions": results, "worker_killed_from_outside": killed, "serve_ended_mid_job": endings,
            "orphans": {"worker SIGKILL": killed.get("orphans"),
                        **{f"serve {e['how']}": e["orphan_processes"] for e in endings}},
            "breaches_named": {f"{Path(r['file']).stem}: {r['reason_names']}": r["as_expected"] for r in results
                               if r["reason_names"]},
            "honest_after_each_ending": all(e["honest_after_passed"] for e in endings),
            "server_alive_at_end": chaos.served.process.poll() is None
            and httpx.get(chaos.served.base + "/api/health", timeout=5).status_code == 200,
            "workers_alive_at_end": len(alive_workers),
            "worker_restarts_logged": log_text.count("started again"),
            "all_as_expected": all(r["as_expected"] for r in results),
            "nothing_lost_or_duplicated": all(r["exactly_once"] and r["status"] == "done" for r in results),
            "total_s": chaos.elapsed(),
        })
        out["no_orphans"] = all(v == 0 for v in out["orphans"].values())
    finally:
        if chaos.served is not None:
            stop(chaos.served.process)
        if cluster is not None:
            cluster.stop()
        out["serve_log_tail"] = chaos.log_text()[-3000:] if chaos.logs else ""
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: out.get(k) for k in ("device", "database", "all_as_expected", "no_orphans", "orphans",
                                              "breaches_named", "honest_after_each_ending",
                                              "nothing_lost_or_duplicated", "server_alive_at_end",
                                              "workers_alive_at_end", "total_s")}, indent=1))


if __name__ == "__main__":
    main()
