"""Measurement on the GPU (correctness, interleaved timing with a 95% CI, ncu L2 hit rate and DRAM bytes) and
the cache of measured results keyed by (kernel source hash, permutation id, target, sizes).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swizzlelab.errors import UserError
from swizzlelab import harness
from swizzlelab.harness.race import RacePlan, race
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import default_workers
from swizzlelab.optimize.records import BaselineTiming, Measurement, NcuFigures, Speedup

CACHE_FILE = "measure-cache.json"


class Measurer(Protocol):
    """Measures an order (Formula, None = the kernel's own site) on the local GPU."""

    device: str

    def measure_baseline(self) -> Measurement: ...

    def measure(self, formula: Any) -> Measurement: ...

    def profile(self, formula: Any) -> NcuFigures | None: ...


class RaceMeasurer(Measurer, Protocol):
    """A measurer that can also check many orders ahead and race them against the kernel's own order."""

    def prepare(self, formula: Any) -> Measurement | None: ...

    def prepare_many(self, formulas: dict[str, Any]) -> dict[str, Measurement | None]: ...

    def race(self, formulas: dict[str, Any], budget_s: float) -> dict[str, Measurement]: ...


def cache_key(kernel_hash: str, permutation_id: str, target: str, sizes: dict[str, Any]) -> str:
    return f"{kernel_hash}|{permutation_id}|{target}|{json.dumps(sizes, sort_keys=True)}"


@dataclass
class MeasureCache:
    """Measured results as one JSON file, rewritten atomically after every new measurement."""

    path: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | Path) -> MeasureCache:
        file = Path(path)
        entries: dict[str, dict[str, Any]] = {}
        if file.is_file():
            try:
                loaded = json.loads(file.read_text())
                entries = dict(loaded.get("entries", {}))
            except (OSError, ValueError):
                entries = {}  # a damaged cache only costs re-measuring
        return cls(file, entries)

    def get(self, key: str) -> Measurement | None:
        record = self.entries.get(key)
        if record is None:
            return None
        try:
            return Measurement.from_dict(record)
        except (TypeError, KeyError, ValueError):
            return None  # an entry of an older layout: measured again

    def put(self, key: str, value: Measurement) -> None:
        self.entries[key] = value.to_dict()
        atomic_write_text(self.path, json.dumps({"version": 2, "entries": self.entries}, indent=1, default=str))


def kernel_metrics(kernels: list[Any], kernel_name: str) -> NcuFigures:
    """L2 hit rate of the longest profiled launch of the optimized kernel, DRAM bytes summed over its launches."""
    mine = [k for k in kernels if kernel_name in k.kernel_name] or list(kernels)
    if not mine:
        return NcuFigures(error="ncu profiled no kernel")
    named = [k.named() for k in mine]
    longest = max(named, key=lambda n: n.get("Duration") or 0.0)
    return NcuFigures(
        l2_hit_rate_pct=longest.get("L2_Cache_Hit_Rate"),
        dram_read_bytes=sum(n.get("DRAM_Read") or 0.0 for n in named),
        dram_write_bytes=sum(n.get("DRAM_Write") or 0.0 for n in named),
        duration_ns=sum(n.get("Duration") or 0.0 for n in named),
        kernels=tuple(k.kernel_name for k in mine),
        source="ncu (lts__t_sector_hit_rate.pct, dram__bytes_read.sum)",
    )


@dataclass
class GpuMeasurer:
    """Runs the task's kernel with an order on the local CUDA GPU through the harness."""

    scenario: Any
    budget_s: float = 4.0
    use_ncu: bool = True
    ncu_dir: Path | None = None
    device: str = ""
    compile_threads: int = field(default_factory=lambda: min(8, default_workers()))

    def __post_init__(self) -> None:
        torch = harness.timing.require_cuda()
        self.device = str(torch.cuda.get_device_name(torch.cuda.current_device()))

    def _launcher(self, formula: Any) -> Any:
        if (self.scenario.k_wave or self.scenario.wave_sync) and not self.scenario.kernel.is_user_file:
            # The task kernel with the scenario's K direction, barrier and the waves its predictions used.
            config = self.scenario.launch_config()
            return lambda data: self.scenario.task.custom_kernel(data, formula, config)
        launch = self.scenario.kernel.launcher or self.scenario.task.custom_kernel
        return lambda data: launch(data, formula)

    def _ncu(self, formula: Any) -> NcuFigures | None:
        if not self.use_ncu:
            return None
        if self.scenario.kernel.is_user_file:
            return NcuFigures(error="ncu profiles the task's own kernel file; not run for a --kernel file")
        if self.scenario.k_wave or self.scenario.wave_sync:
            # The profiling child launches the task's default configuration (K forwards, no barrier); measuring
            # these kernels' DRAM bytes was the K-direction study's job (git 305b79c:benchmarks/matmul_kdir_h100).
            return NcuFigures(error="ncu profiles the kernel's default configuration; not run for --k-dir alternate "
                                    "or --wave-sync")
        try:
            kernels = harness.profile(self.scenario.task, self.scenario.case, formula, self.ncu_dir)
        except UserError as err:
            return NcuFigures(error=str(err))
        return kernel_metrics(kernels, self.scenario.kernel.name)

    def measure_baseline(self) -> Measurement:
        task, case = self.scenario.task, self.scenario.case
        data = task.generate_input(case)
        timing = harness.time_fn(self._launcher(None), data, self.budget_s, check=lambda out: task.check(data, out))
        # ncu runs after the search (loop.profile_at_end): a run the time model stops never needs it, and no
        # measured speedup waits for it.
        return Measurement(
            device=self.device,
            timing=BaselineTiming(mean_ms=timing.mean_ms, sem_ms=timing.sem_ms, n=timing.n, device=self.device),
        )

    def profile(self, formula: Any) -> NcuFigures | None:
        """ncu's figures of the kernel with `formula` (None: its own order), or None when ncu is off."""
        return self._ncu(formula)

    def prepare(self, formula: Any) -> Measurement | None:
        """Compile the order's kernel and check its output once: None when it is right, else the failed
        Measurement (which keeps it out of any race)."""
        result = harness.check_correctness(self.scenario.task, self._launcher(formula), self.scenario.case,
                                           recheck=False)
        if result.passed:
            return None
        return Measurement(device=self.device, passed=False, check_message=result.message)

    def prepare_many(self, formulas: dict[str, Any]) -> dict[str, Measurement | None]:
        """`prepare` of every order, on `compile_threads` threads: Triton compiles each order's kernel on its first
        launch, and much of that time (ptxas, LLVM) runs outside the GIL; each check makes its own inputs."""
        if self.compile_threads <= 1 or len(formulas) < 2:
            return {key: self.prepare(formula) for key, formula in formulas.items()}
        with ThreadPoolExecutor(max_workers=min(self.compile_threads, len(formulas))) as pool:
            futures = {key: pool.submit(self.prepare, formula) for key, formula in formulas.items()}
            return {key: future.result() for key, future in futures.items()}

    def race(self, formulas: dict[str, Any], budget_s: float) -> dict[str, Measurement]:
        """Every order (already prepared) raced against the kernel's own in shared interleaved rounds, the slower
        ones halved out (harness.race); each gets a Measurement whose `raced` figure is its speedup with a 95% CI
        over the rounds it ran, or an error saying why it has none."""
        task, case = self.scenario.task, self.scenario.case
        data = task.generate_input(case)
        result = race(self._launcher(None), {key: self._launcher(formula) for key, formula in formulas.items()},
                      data, RacePlan(budget_s=budget_s), check=lambda out: task.check(data, out))
        out = {}
        for key in formulas:
            comparison = result.comparisons.get(key)
            dropped = result.dropped.get(key, "")
            if comparison is None:
                out[key] = Measurement(device=self.device, passed=False if "wrong output" in dropped else None,
                                       check_message=dropped, error=dropped or "not timed")
                continue
            out[key] = Measurement(device=self.device, passed=True, check_message="checked before and after the race",
                                   raced=Speedup.of(comparison, stage="race", note=dropped))
        return out

    def measure(self, formula: Any) -> Measurement:
        task, case = self.scenario.task, self.scenario.case
        candidate = self._launcher(formula)
        result = harness.check_correctness(task, candidate, case, recheck=False)
        if not result.passed:
            return Measurement(device=self.device, passed=False, check_message=result.message)
        data = task.generate_input(case)
        comparison = harness.compare_interleaved(
            self._launcher(None),
            candidate,
            data,
            budget_s=self.budget_s,
            check_a=lambda out: task.check(data, out),
            check_b=lambda out: task.check(data, out),
        )
        return Measurement(device=self.device, passed=True, check_message=result.message,
                           comparison=Speedup.of(comparison))
