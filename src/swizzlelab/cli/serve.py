"""CLI of the leaderboard service: `swizzlelab serve` (API server plus local or Ray workers) and `swizzlelab worker`.

Library packages never import this module; it sits on top of swizzlelab.leaderboard.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console

from swizzlelab.errors import UserError
from swizzlelab.harness.isolate import reaper
from swizzlelab.io import atomic_write_text
from swizzlelab.runtime import host_mem_share
from swizzlelab.leaderboard.settings import DEFAULT_DATA_DIR, GIB, Settings, default_db_url, parse_gpu_types, settings_from_env
from swizzlelab.leaderboard.supervisor import Slot, Supervisor

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A worker started by `serve` ends when serve ends, even if serve is killed with SIGKILL.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def admin_token_for(data_dir: Path, given: str | None) -> tuple[str, Path | None]:
    """The admin token: given (option or SWIZZLELAB_ADMIN_TOKEN), else the one kept in DATA_DIR/admin-token,
    made on first start (mode 0600)."""
    if given:
        return given, None
    path = data_dir / "admin-token"
    if path.is_file():
        token = path.read_text().strip()
        if token:
            return token, path
    token = "slb_admin_" + secrets.token_urlsafe(32)
    old = os.umask(0o077)
    try:
        atomic_write_text(path, token + "\n")
    finally:
        os.umask(old)
    path.chmod(0o600)
    return token, path


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else starts (so a taken port fails before serve says it is
    up); UserError with one line for a port out of range, a taken one or an address this machine does not have."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is out of range: give 1-65535 (0: any free port)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise UserError(f"--host {host!r} is not an address of this machine ({err})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        taken = err.errno == errno.EADDRINUSE
        raise UserError(f"cannot listen on {host}:{port}: " + ("the port is taken by another program; give another "
                        "--port" if taken else f"{err.strerror or err}")) from None
    sock.set_inheritable(False)
    return sock


def _evaluation_limits(settings: Settings, count: int) -> Settings:
    """An evaluation's host memory, sized for serve's `count` workers unless given; refused where the disk quota
    would not fit the temporary folder's disk."""
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if settings.disk_gib * GIB > free:
        raise UserError(f"--disk-gib {settings.disk_gib:g}: the temporary folder's disk has only {free / GIB:.1f} GiB "
                        "free; give a smaller quota")
    if settings.host_mem_gib:
        return settings
    return settings.with_(host_mem_gib=round(host_mem_share(max(1, count)) / GIB, 2))


def _slots(settings: Settings, db_url: str, count: int, gpus: list[str], ray: Optional[str]) -> list[Slot]:
    """serve's workers: one per GPU (or `count` CPU workers), or one Ray dispatcher; each with the GPU type it will
    serve."""
    from swizzlelab.leaderboard.worker import gpu_type_of

    base = [sys.executable, "-m", "swizzlelab.cli", "worker", "--db", db_url,
            "--gpu-types", ",".join(settings.gpu_types), "--heartbeat-timeout", str(settings.heartbeat_timeout_s),
            "--eval-budget-s", str(settings.eval_budget_s), "--compile-s", str(settings.compile_s),
            "--run-s", str(settings.run_s), "--host-mem-gib", str(settings.host_mem_gib),
            "--disk-gib", str(settings.disk_gib), *_suggest_args(settings)]
    if ray:
        return [Slot(0, base + ["--ray", ray], dict(os.environ), "-ray")]
    slots = []
    for index in range(count):
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(index % len(gpus))
        kind = gpu_type_of(gpus[index % len(gpus)], settings.gpu_types) if gpus else None
        slots.append(Slot(index, base, env, f"-gpu{index % len(gpus)}" if gpus else "-cpu", gpu_type=kind))
    return slots


def _worker_count(spec: str) -> tuple[int, list[str]]:
    """(count, GPU names) for --workers auto|N|0; auto = one per visible GPU, or one CPU worker without a GPU."""
    from swizzlelab.leaderboard.worker import visible_gpu_names

    gpus = visible_gpu_names()
    if spec == "auto":
        return max(1, len(gpus)), gpus
    if not spec.isdigit():
        raise UserError(f"--workers {spec!r} is not auto or a number")
    return int(spec), gpus


def _settings(db: Optional[str], data_dir: Optional[Path], gpu_types: Optional[str], **more: object) -> Settings:
    overrides: dict[str, object] = dict(more)
    if data_dir is not None:
        overrides["data_dir"] = data_dir
        overrides["db_url"] = default_db_url(data_dir)
    if db is not None:
        overrides["db_url"] = db
    if gpu_types is not None:
        overrides["gpu_types"] = parse_gpu_types(gpu_types)
    return settings_from_env(**overrides)


SUGGEST_MODES = ("ranked", "all", "off")


def suggest_options() -> dict[str, object]:
    """The options of suggestions (which block order would be faster), the same for serve and worker."""
    return {
        "suggest": typer.Option(None, "--suggest", help="make suggestions after passing runs: ranked (the "
                                "default; timed on the leaderboard's GPU), all (test runs too: predicted only, for a "
                                "deployment without GPUs) or off"),
        "suggest_screen_s": typer.Option(None, "--suggest-screen-s", help="seconds a suggestion's search ranks "
                                         "orders with the simulator, over all cases (default 60)"),
        "suggest_cases": typer.Option(None, "--suggest-cases", help="benchmark cases a suggestion traces and ranks "
                                      "at (default 0: every one; timing always covers all)"),
        "suggest_top": typer.Option(None, "--suggest-top", help="orders a suggestion times on the GPU, the slower half leaving after each round (default 6)"),
        "suggest_rounds": typer.Option(None, "--suggest-rounds", help="interleaved timing runs of each file "
                                       "(default 2)"),
    }


def _suggest_settings(suggest: Optional[str], **knobs: object) -> dict[str, object]:
    if suggest is not None and suggest not in SUGGEST_MODES:
        raise UserError(f"--suggest {suggest!r}: use one of {', '.join(SUGGEST_MODES)}")
    out = dict(knobs)
    if suggest is not None:
        out.update(suggestions=suggest != "off", suggest_test_runs=suggest == "all")
    return out


def _suggest_args(settings: Settings) -> list[str]:
    """The worker options that carry serve's suggestion settings."""
    mode = "off" if not settings.suggestions else "all" if settings.suggest_test_runs else "ranked"
    return ["--suggest", mode, "--suggest-screen-s", str(settings.suggest_screen_s), "--suggest-cases",
            str(settings.suggest_cases), "--suggest-top", str(settings.suggest_top), "--suggest-rounds",
            str(settings.suggest_rounds)]


def limit_options() -> dict[str, object]:
    """The options of an evaluation's host memory and disk quota, the same for serve and worker."""
    return {
        "host_mem_gib": typer.Option(None, "--host-mem-gib", help="an evaluation's host memory limit (default: "
                                     "this host's share: 3/4 of its memory split between its workers, less 2 GiB "
                                     "each for the evaluator)"),
        "disk_gib": typer.Option(None, "--disk-gib", help="an evaluation's disk quota: its folder is a filesystem "
                                 "of this size (default 8)"),
    }


_LIMITS = limit_options()


_SUGGEST = suggest_options()


def register(app: typer.Typer) -> None:
    """Add `serve` and `worker` to the main app."""

    @app.command("serve")
    def serve_command(
        host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0 exposes it)"),
        port: int = typer.Option(8000, "--port", help="TCP port (0: any free one, printed)"),
        db: Optional[str] = typer.Option(None, "--db", help="database URL: a SQLite path or "
                                         "postgresql+psycopg://USER@HOST:PORT/DB (default: ./swizzlelab-data/leaderboard.db)"),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="folder for the default database and the "
                                                f"admin token (default ./{DEFAULT_DATA_DIR})"),
        workers: str = typer.Option("auto", "--workers", help="local workers: auto (one per visible GPU, or one "
                                    "test-only CPU worker without a GPU), a number, or 0 for the API only"),
        ray: Optional[str] = typer.Option(None, "--ray", help="run evaluations on a Ray cluster at this address "
                                          "('local' starts one here) instead of local workers"),
        gpu_types: Optional[str] = typer.Option(None, "--gpu-types", help="GPU types a fresh database gets "
                                                "leaderboards for (default H100,H200)"),
        admin_token: Optional[str] = typer.Option(None, "--admin-token", envvar="SWIZZLELAB_ADMIN_TOKEN",
                                                  help="admin bearer token (default: made once, kept in DATA_DIR/admin-token)"),
        requests_per_minute: Optional[int] = typer.Option(None, "--requests-per-minute"),
        submissions_per_hour: Optional[int] = typer.Option(None, "--submissions-per-hour",
                                                           help="per-user limit written on a fresh database"),
        heartbeat_timeout: Optional[float] = typer.Option(None, "--heartbeat-timeout"),
        eval_budget_s: Optional[float] = typer.Option(None, "--eval-budget-s", help="timing budget per benchmark "
                                                      "case for the workers (default 3 s)"),
        compile_s: Optional[float] = typer.Option(None, "--compile-s", help="a submission's import + first call "
                                                  "may take this long (default 120 s)"),
        run_s: Optional[float] = typer.Option(None, "--run-s", help="... and the rest of its run (default 180 s)"),
        log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level"),
        suggest: Optional[str] = _SUGGEST["suggest"],
        suggest_screen_s: Optional[float] = _SUGGEST["suggest_screen_s"],
        suggest_cases: Optional[int] = _SUGGEST["suggest_cases"],
        suggest_top: Optional[int] = _SUGGEST["suggest_top"],
        suggest_rounds: Optional[int] = _SUGGEST["suggest_rounds"],
        host_mem_gib: Optional[float] = _LIMITS["host_mem_gib"],
        disk_gib: Optional[float] = _LIMITS["disk_gib"],
    ) -> None:
        """Start the leaderboard API (FastAPI on uvicorn) and its workers; the schema is upgraded on start."""
        import uvicorn

        from swizzlelab.leaderboard.api import create_app
        from swizzlelab.leaderboard.db import open_database

        console = Console(stderr=True)
        settings = _settings(db, data_dir, gpu_types, requests_per_minute=requests_per_minute,
                             submissions_per_hour=submissions_per_hour, heartbeat_timeout_s=heartbeat_timeout,
                             eval_budget_s=eval_budget_s, compile_s=compile_s, run_s=run_s,
                             host_mem_gib=host_mem_gib, disk_gib=disk_gib,
                             **_suggest_settings(suggest, suggest_screen_s=suggest_screen_s,
                                                 suggest_cases=suggest_cases, suggest_top=suggest_top,
                                                 suggest_rounds=suggest_rounds))
        # Bad options are refused before anything is written: the port (bound now: a taken one fails here), the
        # worker count and limits, then the database URL (opening it checks it), and only then the admin token file.
        listener = listening_socket(host, port)
        count, gpus = (0, []) if ray else _worker_count(workers)
        settings = _evaluation_limits(settings, count)
        database = open_database(settings.db_url)
        token, token_path = admin_token_for(settings.data_dir, admin_token or settings.admin_token)
        settings = settings.with_(admin_token=token)

        def say(text: str) -> None:
            console.print(f"[serve] {text}", highlight=False, soft_wrap=True, markup=False)

        swept = reaper.sweep()  # what a serve killed outright left: processes of its evaluations, their folders
        if swept:
            say(f"swept what dead evaluators left: {swept.describe()}")
        supervisor = Supervisor(database, _slots(settings, database.url, count, gpus, ray), say=say,
                                preexec=_die_with_parent)
        # A submission for a GPU type whose worker is still coming up waits for it (instead of a 409).
        settings = settings.with_(workers_starting=supervisor.starting_types)
        application = create_app(settings, database)
        supervisor.start()
        where = f"admin token in {token_path}" if token_path else "admin token as given"
        engine = "Ray at " + ray if ray else f"{count} local worker(s)" + (f" on {', '.join(gpus)}" if gpus else
                                                                         " (no GPU: test jobs only)" if count else "")
        port = listener.getsockname()[1]
        console.print(f"swizzlelab leaderboard on http://{host}:{port} (API docs /docs); database "
                      f"{database.engine.url.render_as_string(hide_password=True)}; {engine}; {where}", highlight=False)
        # uvicorn shuts down on SIGTERM, then raises it again with the handler it found: this one, so that the
        # workers are stopped and reaped below (the default handler ended serve there, leaving their folders).
        signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(128 + signal.SIGTERM))
        try:
            config = uvicorn.Config(application, log_level=log_level, access_log=False)
            uvicorn.Server(config).run(sockets=[listener])
        finally:
            supervisor.stop()
            database.dispose()

    @app.command("worker")
    def worker_command(
        db: Optional[str] = typer.Option(None, "--db", help="database URL (default: ./swizzlelab-data/leaderboard.db)"),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
        ray: Optional[str] = typer.Option(None, "--ray", help="dispatch evaluations to Ray at this address "
                                          "('local' starts one here)"),
        ray_resources: Optional[str] = typer.Option(None, "--ray-resources", help="with --ray local: custom "
                                                    "resources as JSON, e.g. '{\"accelerator_type:H100\": 1}'"),
        ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help="with --ray local: CPUs Ray may use"),
        gpu_types: Optional[str] = typer.Option(None, "--gpu-types"),
        gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="this worker's GPU type (default: detected "
                                               "from the visible GPU; none = test jobs only)"),
        heartbeat_timeout: Optional[float] = typer.Option(None, "--heartbeat-timeout",
                                                          help="re-run jobs whose worker was silent this long (s)"),
        heartbeat_interval: Optional[float] = typer.Option(None, "--heartbeat-interval"),
        eval_budget_s: Optional[float] = typer.Option(None, "--eval-budget-s", help="timing budget per benchmark case (s)"),
        compile_s: Optional[float] = typer.Option(None, "--compile-s", help="limit on a submission's import + first call (s)"),
        run_s: Optional[float] = typer.Option(None, "--run-s", help="limit on the rest of its run (s)"),
        max_jobs: Optional[int] = typer.Option(None, "--max-jobs", help="stop after this many jobs"),
        worker_id: Optional[str] = typer.Option(None, "--id", help="name in the runs table (default host:pid:gpu)"),
        suggest: Optional[str] = _SUGGEST["suggest"],
        suggest_screen_s: Optional[float] = _SUGGEST["suggest_screen_s"],
        suggest_cases: Optional[int] = _SUGGEST["suggest_cases"],
        suggest_top: Optional[int] = _SUGGEST["suggest_top"],
        suggest_rounds: Optional[int] = _SUGGEST["suggest_rounds"],
        host_mem_gib: Optional[float] = _LIMITS["host_mem_gib"],
        disk_gib: Optional[float] = _LIMITS["disk_gib"],
    ) -> None:
        """Claim jobs from the database and run them through the isolated evaluator (or on Ray)."""
        from swizzlelab.leaderboard.db import open_database
        from swizzlelab.leaderboard.queue import WorkerCaps
        from swizzlelab.leaderboard.worker import Worker, default_worker_id, gpu_type_of, visible_gpu_names

        settings = _settings(db, data_dir, gpu_types, heartbeat_timeout_s=heartbeat_timeout,
                             heartbeat_interval_s=heartbeat_interval, eval_budget_s=eval_budget_s, compile_s=compile_s,
                             run_s=run_s, host_mem_gib=host_mem_gib, disk_gib=disk_gib,
                             **_suggest_settings(suggest, suggest_screen_s=suggest_screen_s, suggest_cases=suggest_cases,
                                                 suggest_top=suggest_top, suggest_rounds=suggest_rounds))
        database = open_database(settings.db_url)
        stop = threading.Event()
        halt: list[Callable[[], None]] = [stop.set]

        def _stop(_sig: int, _frame: object) -> None:
            # In a thread of its own: the handler may interrupt the main thread while it holds a lock halt() takes.
            threading.Thread(target=halt[0], daemon=True).start()

        # SIGTERM (serve stopping its workers) and Ctrl-C alike: the job under way goes back to the queue, its
        # child killed; nothing of the evaluation outlives the worker.
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        try:
            if ray:
                from swizzlelab.leaderboard.ray_backend import RayDispatcher, connect

                resources = json.loads(ray_resources) if ray_resources else None
                handle = connect(ray, num_cpus=ray_cpus, resources=resources)
                # The dispatcher makes no suggestions, so the results it records queue none (none would ever run).
                RayDispatcher(database, settings.with_(suggestions=False), worker_id or default_worker_id("ray"),
                              handle, stop=stop).run(max_jobs)
                return
            gpus = visible_gpu_names()
            kind = gpu_type.upper() if gpu_type else (gpu_type_of(gpus[0], settings.gpu_types) if gpus else None)
            if gpus and kind is None:
                Console(stderr=True).print(f"GPU {gpus[0]!r} is none of {', '.join(settings.gpu_types)}: "
                                           "taking test jobs only", highlight=False)
            if gpus and kind is not None:
                # The CLI's start-up picks the Triton interpreter when it cannot reach libcuda itself; a worker
                # that nvidia-smi shows a GPU of a served type runs its jobs on that GPU.
                os.environ.pop("TRITON_INTERPRET", None)
            caps = WorkerCaps(worker_id=worker_id or default_worker_id(kind), gpu_type=kind)
            worker = Worker(database, settings, caps, stop=stop)
            halt[0] = worker.halt
            worker.run(max_jobs)
        except KeyboardInterrupt:
            stop.set()
        except json.JSONDecodeError as err:
            raise UserError(f"--ray-resources is not JSON: {err}") from None
        finally:
            database.dispose()
