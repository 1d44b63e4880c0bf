"""Settings of one leaderboard deployment: database, GPU types, limits, timeouts, the admin token.

Built by the CLI from its options (and SWIZZLELAB_* environment variables); passed to the app factory and workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from swizzlelab.errors import UserError
from swizzlelab.names import check_gpu_type
from swizzlelab.runtime import host_mem_share, host_memory_bytes, nvidia_gpu_names

DEFAULT_DATA_DIR = Path("swizzlelab-data")
DEFAULT_GPU_TYPES = ("H100", "H200")
MODES = ("test", "benchmark", "ranked", "profile")
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3", ".db3")
DEFAULT_DISK_GIB = 8.0  # an evaluation's disk quota (harness.isolate.limits.DEFAULT_DISK_BYTES)
GIB = 2**30


def default_db_url(data_dir: Path = DEFAULT_DATA_DIR) -> str:
    """The embedded default: a SQLite file under the data folder."""
    return f"sqlite:///{(data_dir / 'leaderboard.db').resolve()}"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite database named by a bare path or a sqlite:/// URL (None for other backends and
    in-memory SQLite). A bare path must end in .db, .sqlite, ...: anything else is a mistyped URL."""
    if "://" not in url:
        if not url.strip() or Path(url).suffix.lower() not in SQLITE_SUFFIXES:
            raise UserError(f"database {url!r} is neither a URL (sqlite:///PATH, postgresql+psycopg://USER@HOST/DB) "
                            f"nor a file path ending in {', '.join(SQLITE_SUFFIXES)}")
        return Path(url).expanduser().resolve()
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    path = rest[1:].split("?")[0] if rest.startswith("/") else rest.split("?")[0]
    return Path(path) if path and path != ":memory:" else None


def check_db_url(url: str) -> None:
    """A database the user named (--db): a URL or a .db path whose folder exists. The folder is not created:
    making one for a mistyped path would hide the typo (only the default data folder is made on first start)."""
    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        raise UserError(f"database folder {path.parent} does not exist; create it (mkdir -p {path.parent}) or give "
                        "another --db")


@dataclass(frozen=True)
class Settings:
    """Everything the server and workers need besides the code; immutable once built."""

    db_url: str = field(default_factory=default_db_url)
    data_dir: Path = DEFAULT_DATA_DIR
    gpu_types: tuple[str, ...] = DEFAULT_GPU_TYPES
    # Admin bearer token; None means only users created with is_admin can reach admin routes.
    admin_token: str | None = None
    max_code_bytes: int = 64 * 1024
    max_profile_bytes: int = 32 * 1024 * 1024  # per .ncu-rep kept with a run; larger ones are dropped with a note
    # Submissions a user may make per hour on all leaderboards (a rate_limits row written on a fresh database).
    submissions_per_hour: int = 120
    # API requests per user (or, for a request without a valid token, per client address) per minute; 429 past it.
    requests_per_minute: int = 600
    heartbeat_interval_s: float = 2.0
    heartbeat_timeout_s: float = 20.0
    max_attempts: int = 3  # claims of one job before it is given up as a service error
    poll_interval_s: float = 0.5
    # Timing budget per benchmark case of a benchmark/ranked run (the evaluator stops earlier at 0.1% sem).
    eval_budget_s: float = 3.0
    # An idle GPU worker times the library rows of its leaderboards' tasks ahead of their submissions.
    library_ahead: bool = True
    # The isolated child's wall limits: its import + first call (JIT builds), and everything after.
    compile_s: float = 120.0
    run_s: float = 180.0
    # A secret run whose score differs from the public one by more than this fraction is flagged (the two runs
    # time different inputs of the same sizes; H100 repeat timings of the built-in tasks vary by well under 5%).
    secret_rel_tolerance: float = 0.15
    # Suggestions (which block order would be faster): queued after each passing ranked run (and, with
    # suggest_test_runs, each passing test run: predicted only, for a deployment without GPUs); the search's
    # screening seconds over all ranked cases; wall seconds of each suggestion child (trace and rank; compile);
    # where the simulator runs (sim.gpu.ENGINES: the CPU engine by default, the one run inside the sandbox so far);
    # benchmark cases ranked (0: all); orders timed; interleaved rounds.
    suggestions: bool = True
    suggest_test_runs: bool = False
    suggest_screen_s: float = 60.0
    suggest_child_s: float = 1200.0
    suggest_sim_engine: str = "cpu"
    suggest_cases: int = 0
    suggest_top: int = 6
    suggest_rounds: int = 2
    suggest_child_mem_gib: float = 0.0  # a ranking child's resident memory; 0: the host's share per GPU
    # An evaluation's host memory (0: this host's share for one of the evaluations its GPUs run at once, sized by
    # limits.host_mem_share; serve passes its workers the share for their count) and its disk quota.
    host_mem_gib: float = 0.0
    disk_gib: float = DEFAULT_DISK_GIB
    # `serve`'s own workers: the GPU types of those still starting (a submission for them waits, not refused).
    workers_starting: Callable[[], frozenset[str]] | None = None

    def host_mem_bytes(self) -> int:
        """An evaluation's host memory limit: as set, else this host's share for one evaluation per GPU."""
        if self.host_mem_gib:
            return int(self.host_mem_gib * GIB)
        return host_mem_share(max(1, len(nvidia_gpu_names(visible_only=False))))

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    def validate(self) -> Settings:
        if self.db_url != default_db_url(self.data_dir):
            check_db_url(self.db_url)
        if not self.gpu_types:
            raise UserError("no GPU types configured; give at least one, e.g. --gpu-types H100,H200")
        for name, value in (("max code size", self.max_code_bytes), ("submissions per hour", self.submissions_per_hour),
                            ("requests per minute", self.requests_per_minute)):
            if value <= 0:
                raise UserError(f"{name} must be > 0, got {value}")
        if self.eval_budget_s <= 0:
            raise UserError(f"the evaluation budget must be > 0 s, got {self.eval_budget_s}")
        if self.compile_s <= 0 or self.run_s <= 0:
            raise UserError(f"the evaluator's limits must be > 0 s, got compile {self.compile_s}, run {self.run_s}")
        if self.suggest_screen_s <= 0 or self.suggest_child_s <= self.suggest_screen_s:
            raise UserError(f"suggestions need screen seconds > 0 and a child limit above them, got "
                            f"{self.suggest_screen_s} and {self.suggest_child_s}")
        if self.suggest_cases < 0 or self.suggest_top < 1 or self.suggest_rounds < 2:
            raise UserError(f"suggestions need cases >= 0 (0: all), top >= 1 and rounds >= 2 (an interval needs two "
                            f"runs of a file), got {self.suggest_cases}, {self.suggest_top}, {self.suggest_rounds}")
        if self.suggest_child_mem_gib < 0:
            raise UserError(f"a ranking child's memory must be >= 0 GiB (0: automatic), got {self.suggest_child_mem_gib}")
        if self.host_mem_gib < 0 or self.host_mem_gib * GIB > host_memory_bytes():
            raise UserError(f"--host-mem-gib {self.host_mem_gib:g}: give 0 (this host's share) or at most this "
                            f"host's {host_memory_bytes() / GIB:.1f} GiB")
        if self.disk_gib <= 0:
            raise UserError(f"--disk-gib {self.disk_gib:g}: an evaluation's disk quota must be > 0 GiB")
        if self.heartbeat_timeout_s <= 2 * self.heartbeat_interval_s:
            raise UserError("the heartbeat timeout must exceed twice the heartbeat interval")
        return self


def parse_gpu_types(text: str) -> tuple[str, ...]:
    """'H100,H200' -> ('H100', 'H200'); names are upper-cased, duplicates dropped."""
    names: list[str] = []
    for part in text.split(","):
        name = check_gpu_type(part) if part.strip() else ""
        if name and name not in names:
            names.append(name)
    if not names:
        raise UserError(f"no GPU types in {text!r}; give names such as H100,H200")
    return tuple(names)


def settings_from_env(**overrides: object) -> Settings:
    """Defaults, then SWIZZLELAB_ADMIN_TOKEN / SWIZZLELAB_GPU_TYPES / SWIZZLELAB_DATA_DIR, then `overrides`."""
    values: dict[str, object] = {}
    if os.environ.get("SWIZZLELAB_DATA_DIR"):
        data_dir = Path(os.environ["SWIZZLELAB_DATA_DIR"])
        values["data_dir"] = data_dir
        values["db_url"] = default_db_url(data_dir)
    if os.environ.get("SWIZZLELAB_ADMIN_TOKEN"):
        values["admin_token"] = os.environ["SWIZZLELAB_ADMIN_TOKEN"]
    if os.environ.get("SWIZZLELAB_GPU_TYPES"):
        values["gpu_types"] = parse_gpu_types(os.environ["SWIZZLELAB_GPU_TYPES"])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**values).validate()  # type: ignore[arg-type]
