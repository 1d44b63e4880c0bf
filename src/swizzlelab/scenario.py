"""One scenario: a task case on a target GPU, with its tile grid, swizzle names, occupancy, kernel site and trace.

Every command and script builds what it works on here (`load_scenario`), so they agree for the same inputs.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from swizzlelab.errors import FormulaError, KernelSiteError, UserError
from swizzlelab.fmt import fmt_bytes, grid_text
from swizzlelab.hw import HardwareModel, Target, nvidia_blocks_per_sm, resolve_target
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.swizzle import Formula, Permutation, Site, compose, family, find_site, parse_formula, to_permutation
from swizzlelab.swizzle.emit import splice_source
from swizzlelab.swizzle.evaluate import evaluate, implicit_names
from swizzlelab.swizzle.fitting import continue_kernel, over_launch_index
from swizzlelab.swizzle.lang import read_formula_file
from swizzlelab.swizzle.proof import Proof, permutation_id, prove_outputs
from swizzlelab.tasks import KernelTask, Task, load_task
from swizzlelab.trace import AccessTrace
from swizzlelab.trace.kdir import alternate_by_wave
from swizzlelab.trace.tracer import trace_call
from swizzlelab.userkernel.load import KernelFile, load_kernel_file
from swizzlelab.userkernel.marked import N_AXIS0

# Kernel launch configurations a scenario may use: the GPU one (what predictions and measurements are for), the
# CPU interpreter's, or whichever this process's backend would pick ("backend").
CONFIGS = {"gpu": "GPU_CONFIG", "cpu": "CPU_CONFIG", "backend": ""}
# K directions a kernel with a `k_wave` field in its configuration can take (--k-dir): forwards in every program,
# or backwards in odd waves of the programs resident at once (tasks/matmul/kernel.py; k_wave = -1).
K_DIRS = {"forward": 0, "alternate": -1}
# Peak memory while a formula is evaluated and proved on the grid, per program (tracemalloc on a 2048x2048 grid:
# grouped:GROUP_M=8 73 bytes, xcd+grouped 97, hilbert:SIDE=8 216; the largest family sets the figure).
PERM_BYTES_PER_PROGRAM = 216
# Peak memory per line access while an analytic trace is built (matmul 8192^3: 135M accesses, 1.7 GB above
# the process's start; git 305b79c:benchmarks/trace_speed/trace_speed_cpu.json) plus the simulator's copy of its keys.
TRACE_BYTES_PER_ACCESS = 24


@dataclass(frozen=True)
class KernelInfo:
    """The @triton.jit function with a swizzle site, where it lives, and how to launch it."""

    jit_fn: Any
    name: str
    module: ModuleType
    path: Path
    source: str  # the function's own source (decorator included), dedented
    module_source: str
    source_hash: str  # sha256 prefix of the module source: a measurement cache key's kernel part
    launcher: Any  # custom_kernel(data, order) or None when the file has no launcher
    is_user_file: bool

    def site_text(self) -> str:
        """The kernel's own order: the text of its swizzle site, dedented."""
        site = find_site(self.source, self.name)
        lines = self.source.splitlines()[site.start : site.stop]
        return textwrap.dedent("\n".join(lines)).strip() + "\n"


@dataclass(frozen=True)
class Occupancy:
    """Programs resident per SM/CU in the simulator, and where that figure comes from."""

    programs: int
    source: str

    def text(self) -> str:
        return f"occupancy {self.programs} program(s) per SM/CU ({self.source})"


def default_occupancy(kernel_module: Any, model: HardwareModel) -> Occupancy:
    """THE occupancy rule of every command: the kernel module's H100_OCCUPANCY (ncu-measured programs per SM
    for its GPU_CONFIG) on NVIDIA targets, else 1 (which under-fills the GPU, and says so)."""
    measured = getattr(kernel_module, "H100_OCCUPANCY", None)
    if measured and model.vendor == "nvidia":
        return Occupancy(int(measured), "the kernel's, measured by ncu on an H100")
    return Occupancy(1, "no measured occupancy for this kernel on this target; set --occupancy")


@dataclass(frozen=True)
class Checked:
    """A formula evaluated on every program of the grid: its proof and, when a bijection, the tile order."""

    formula: Formula
    proof: Proof
    perm: Any  # np.ndarray int64, launch index -> tile
    permutation_id: str


@dataclass
class Scenario:
    """A task case on a concrete tile grid for one kernel, target model and occupancy; the trace on demand.
    `task` is a task folder (Task) or a user's kernel file (userkernel.UserTask): both are a KernelTask."""

    task: KernelTask
    case: dict[str, Any]
    config_name: str
    config: Any
    grid: tuple[int, ...]
    args: dict[str, Any]
    consts: dict[str, Any]
    target: Target
    occupancy: Occupancy
    kernel_module: ModuleType  # the module whose tile_grid / swizzle_args gave the grid (task's or user's)
    kernel_file: Path | None = None
    outputs: tuple[str, ...] | None = None  # names formula files assign for the site (--outputs); None: by rank
    # lines saying what was chosen for a user's kernel file (site lines, config, launcher, trace); logged by optimize
    about: tuple[str, ...] = ()
    _kernel: KernelInfo | None = field(default=None, repr=False)
    _trace: AccessTrace | None = field(default=None, repr=False)

    # -- what it is ----------------------------------------------------------------------------------------
    @property
    def model(self) -> HardwareModel:
        return self.target.model

    @property
    def sizes(self) -> dict[str, Any]:
        return {k: v for k, v in self.case.items() if k != "seed"}

    @property
    def rank(self) -> int:
        return len(self.grid)

    @property
    def n_tiles(self) -> int:
        return math.prod(self.grid)

    def sizes_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.sizes.items())

    def label(self) -> str:
        """'matmul m=4096 n=4096 k=4096 seed=11, grid 32x32'."""
        return f"{self.task.name} {self.task.case_label(self.case)}, grid {grid_text(self.grid)}"

    def header(self) -> str:
        """One line for a command's output: task, case, grid, target and occupancy with its source."""
        k_dir = f", K walked backwards by odd waves of {self.k_wave} launches" if self.k_wave else ""
        sync = f", each wave of {self.wave_sync} launches starting after the previous one" if self.wave_sync else ""
        return f"task {self.label()}, target {self.model.name}, {self.occupancy.text()}{k_dir}{sync}"

    def _config_wave(self, name: str) -> int:
        # A configuration's wave field: -1 is the programs resident at once on the target (units x occupancy).
        wave = int(getattr(self.config, name, 0) or 0)
        return self.model.n_units * self.occupancy.programs if wave < 0 else wave

    @property
    def k_wave(self) -> int:
        """Launches per wave of the kernel's K alternation (0: every program walks K forwards)."""
        return self._config_wave("k_wave")

    @property
    def wave_sync(self) -> int:
        """Launches per wave of the kernel's barrier between waves (0: none)."""
        return self._config_wave("sync_wave")

    def _waves(self) -> dict[str, int]:
        """The configuration's wave fields that are set, resolved: {"k_wave": W, "sync_wave": W} or fewer."""
        return {name: wave for name, wave in (("k_wave", self.k_wave), ("sync_wave", self.wave_sync)) if wave}

    def identity(self) -> dict[str, Any]:
        """What makes two runs the same scenario (an optimize run resumes only into an identical one)."""
        return {
            "task": self.task.name,
            "sizes": self.sizes,
            "seed": self.case.get("seed"),
            "grid": list(self.grid),
            "target": self.model.name,
            "kernel": str(self.kernel.path),
            "kernel_hash": self.kernel.source_hash,
            "occupancy": self.occupancy.programs,
            "occupancy_source": self.occupancy.source,
            # Only when set, so runs written before the K direction existed still resume.
            **self._waves(),
        }

    def launch_config(self) -> Any:
        """The configuration a GPU launch takes: with the K alternation's wave resolved as the predictions resolve it
        (units x occupancy, --occupancy included), not again from the launching GPU."""
        waves = self._waves()
        return replace(self.config, **waves) if waves else self.config

    def kernel_key(self) -> str:
        """The kernel part of a measurement cache key: its source, and the waves it launches with."""
        return self.kernel.source_hash + "".join(f"|{name}={wave}" for name, wave in self._waves().items())

    # -- the kernel and its orders ---------------------------------------------------------------------------
    @property
    def kernel(self) -> KernelInfo:
        """The jit function with the swizzle site (the user's --kernel file, else the task's kernel.py)."""
        if self._kernel is None:
            path = Path(self.kernel_module.__file__ or _task_folder(self.task) / "kernel.py")
            self._kernel = kernel_from_module(self.kernel_module, path, is_user_file=self.kernel_file is not None)
        return self._kernel

    def default_order(self) -> Formula:
        """The kernel's own order: its swizzle site as a formula."""
        return self.formula(self.kernel.site_text())

    def formula(self, text: str, outputs: Sequence[str] | None = None) -> Formula:
        """Formula text for this scenario's kernel: outputs that fit the grid and the site, a launch the kernel
        makes (1-D), names defined before the site. A linear formula on a 2-D grid runs before row-major."""
        names = tuple(outputs) if outputs else self.outputs
        formula = parse_formula(text, names, rank=self.rank)
        return self._fit(formula, check_site=True)

    def parse_order(self, spec: str | Formula | None, outputs: Sequence[str] | None = None) -> Formula:
        """An order: None = the kernel's own, a Formula, a family spec ('grouped:GROUP_M=8') or a formula file."""
        if spec is None:
            return self.default_order()
        if isinstance(spec, Formula):
            return self._fit(spec, check_site=False)
        outputs = tuple(outputs) if outputs else self.outputs
        if not outputs:
            return self._fit(self.task.parse_order(spec), check_site=False, where=spec)
        path = Path(spec)
        if not path.is_file():
            raise UserError(f"--outputs applies to a formula file and {spec} is none; a family spec names its own")
        text = read_formula_file(path)  # one-line errors for a directory, a binary or a missing file
        return self._fit(parse_formula(text, tuple(outputs), rank=self.rank), check_site=False, where=str(spec))

    def _fit(self, formula: Formula, check_site: bool, where: str = "formula") -> Formula:
        # a user's kernel file names its tile counts its own way (grid_m, num_tile_n): orders read those names
        in_kernel_terms = getattr(self.task, "in_kernel_terms", None)
        if in_kernel_terms is not None:
            formula = in_kernel_terms(formula)
        self._check_launch(formula, where)
        formula = continue_kernel(formula, self.site, self.available_names(), f"{self.task.name}'s kernel", where)
        if N_AXIS0 in self.args:
            # a user's kernel launched 2-D: swizzlelab evaluates its site over the launch index
            formula = over_launch_index(formula, N_AXIS0)
        formula = self._site_outputs(formula, where)
        if check_site:
            # Splicing checks the names the formula needs are defined before the kernel's site.
            splice_source(self.kernel.source, formula, self.kernel.name, self.kernel.name)
        return formula

    @cached_property
    def site(self) -> Site:
        """The kernel's swizzle site: its launch rank and the lines before it a formula may continue."""
        return find_site(self.kernel.source, self.kernel.name)

    def _check_launch(self, formula: Formula, where: str) -> None:
        """A formula that reads tl.program_id(1) needs a kernel launched 2-D (axis 0 fastest)."""
        if formula.launch_rank > self.site.launch_rank:
            raise FormulaError(
                f"{where} reads tl.program_id({formula.launch_rank - 1}) but {self.task.name}'s kernel launches a "
                f"{self.site.launch_rank}-D grid of {self.n_tiles} programs: write the order over tl.program_id(0) "
                "(tile = launch index)"
            )

    def _site_outputs(self, formula: Formula, where: str) -> Formula:
        """The formula with the outputs the kernel's site assigns: pid (1-D) or pid_m, pid_n (2-D). A linear
        formula on a 2-D grid runs before row-major decoding; a formula's own output names (--outputs) are
        assigned to the site's names at its end, and the log says so through the formula text."""
        site = ("pid",) if self.rank == 1 else ("pid_m", "pid_n")
        if formula.outputs == site:
            return formula
        if self.rank == 2 and len(formula.outputs) == 1:
            linear = formula
            if formula.outputs != ("pid",):
                linear = parse_formula(formula.normalized_source() + f"pid = {formula.outputs[0]}\n", ("pid",))
            return compose(linear, family("identity"))
        if len(formula.outputs) != len(site):
            raise FormulaError(
                f"{where} yields {', '.join(formula.outputs)} but the tile grid {grid_text(self.grid)} is "
                f"{self.rank}-D: {self.task.name}'s site needs {' and '.join(site)}"
            )
        # Own names: copied into the site's names last (through temporaries, so one may read the other).
        temps = [f"swz_out_{i}" for i in range(len(site))]
        tail = "".join(f"{t} = {o}\n" for t, o in zip(temps, formula.outputs))
        tail += "".join(f"{name} = {t}\n" for name, t in zip(site, temps))
        return parse_formula(formula.normalized_source() + tail, site)

    def available_names(self) -> set[str]:
        """Names a formula may read at this kernel's site besides tl.*: the grid sizes and the kernel's args."""
        return set(implicit_names(self.grid)) | set(self.args) | set(self.consts)

    def check(self, formula: Formula) -> Checked:
        """Evaluate `formula` on every program: the proof (never raises on defects) and the tile order."""
        self.require_memory(include_trace=False)
        outputs = evaluate(formula, self.grid, self.args, self.consts)
        proof, tiles = prove_outputs(outputs, formula, self.grid)
        tiles = np.ascontiguousarray(tiles, dtype=np.int64)
        return Checked(formula=formula, proof=proof, perm=tiles, permutation_id=permutation_id(self.grid, tiles))

    def permutation(self, order: str | Formula | None = None) -> Permutation:
        """The proven permutation of an order on this grid; NotABijectionError (exit 1) with counts otherwise."""
        self.require_memory(include_trace=False)
        return to_permutation(self.parse_order(order), self.grid, self.args, self.consts)

    # -- the trace -------------------------------------------------------------------------------------------
    @property
    def trace(self) -> AccessTrace:
        """The analytic access trace (the task's access.py) of this case, built once."""
        if self._trace is None:
            if not isinstance(self.task, Task) or not self.task.has_access_model:
                raise UserError(
                    f"task {self.task.name} has no access model (access.py): predictions need one; record a trace "
                    "with `swizzlelab trace --traced`"
                )
            self.require_memory(include_trace=True)
            trace = self.task.access_model(self.case, config=self.config)
            if tuple(trace.grid) != self.grid:
                raise UserError(
                    f"task {self.task.name}: access model grid {tuple(trace.grid)} differs from tile_grid {self.grid}"
                )
            self._trace = trace
        return self._trace

    def trace_for(self, perm: Any) -> AccessTrace:
        """The trace as launched in order `perm`: the analytic one, with the steps of odd waves reversed when the
        kernel alternates its K direction (trace.kdir; the transform depends on which tiles run in which wave)."""
        return alternate_by_wave(self.trace, perm, self.k_wave) if self.k_wave else self.trace

    def recorded_trace(self, kernel_name: str | None = None, data: dict[str, Any] | None = None) -> AccessTrace:
        """The kernel's accesses recorded under the Triton interpreter (small cases only); `data` defaults to the
        case's seeded inputs. Launched in the identity order, since the recorder takes program i for tile i (a
        kernel's own site may be another)."""
        self.require_memory(include_trace=True)
        data = self.task.generate_input(self.case) if data is None else data
        identity = self.task.parse_order("identity" if len(self.grid) == 2 else "identity1d")
        return trace_call(lambda: self.task.custom_kernel(data, identity, self.config), self.grid,
                          kernel_name=kernel_name, meta={"task": self.task.name})

    def line_accesses(self) -> int | None:
        """The access model's estimate of the trace's line accesses (None when the task gives none)."""
        if not isinstance(self.task, Task) or self.task.access is None:
            return None
        estimate = getattr(self.task.access, "line_accesses", None)
        if estimate is None:
            return None
        cfg = self.config if self.config is not None else getattr(self.task.kernel, "GPU_CONFIG", None)
        return int(estimate(**self.case, config=cfg))

    def required_bytes(self, include_trace: bool = True) -> tuple[int, str]:
        """(bytes, what for): the memory proving an order, and with `include_trace` building the trace, needs."""
        need = self.n_tiles * PERM_BYTES_PER_PROGRAM
        what = f"{self.n_tiles:,} programs"
        accesses = self.line_accesses() if include_trace else None
        if accesses:
            need += accesses * TRACE_BYTES_PER_ACCESS
            what += f", ~{accesses:,} line accesses in its trace"
        return need, what

    def require_memory(self, include_trace: bool = True) -> None:
        """Refuse up front (one line, the bytes it would need) what would not fit in this machine's memory."""
        need, what = self.required_bytes(include_trace)
        available = available_memory_bytes()
        if need > available:
            raise UserError(
                f"{self.task.name} {self.sizes_label()} needs about {fmt_bytes(need)} of memory ({what}); this "
                f"machine has {fmt_bytes(available)} available: use smaller sizes"
            )


# ---------------------------------------------------------------------------------------------- kernels


def _task_folder(task: KernelTask) -> Path:
    if not isinstance(task, Task):
        raise UserError(f"{task.name} is a kernel file, not a task folder: its scenario names its kernel itself")
    return task.path


def _has_site(source: str, name: str) -> bool:
    try:
        find_site(source, name)
    except KernelSiteError:
        return False
    return True


def _jit_functions(module: ModuleType) -> list[tuple[str, Any, str]]:
    """(name, jit fn, source) of every @triton.jit function defined in `module`."""
    out = []
    for name, value in vars(module).items():
        fn = getattr(value, "fn", None)
        if fn is None or not callable(fn) or getattr(fn, "__module__", None) != module.__name__:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        out.append((name, value, source))
    return out


def kernel_from_module(module: ModuleType, path: Path, is_user_file: bool) -> KernelInfo:
    """The one jit function of `module` that has a swizzle site; KernelSiteError when none (or several) do."""
    with_site = [(n, fn, src) for n, fn, src in _jit_functions(module) if _has_site(src, n)]
    if not with_site:
        raise KernelSiteError(
            f"{path}: no @triton.jit function with a swizzle site: add the line `pid = tl.program_id(0)` or wrap "
            "the block computing pid_m/pid_n in '# swizzle: begin' / '# swizzle: end'"
        )
    if len(with_site) > 1:
        # Sites are also found automatically now; one marked by its author (markers or the one-line
        # `pid = tl.program_id(0)`) picks the kernel among several.
        explicit = [entry for entry in with_site if find_site(entry[2], entry[0]).explicit]
        if len(explicit) == 1:
            with_site = explicit
    if len(with_site) > 1:
        raise KernelSiteError(
            f"{path}: {len(with_site)} @triton.jit functions have a swizzle site "
            f"({', '.join(n for n, _, _ in with_site)}): keep the site in one of them"
        )
    name, jit_fn, source = with_site[0]
    module_source = path.read_text()
    return KernelInfo(
        jit_fn=jit_fn,
        name=name,
        module=module,
        path=path,
        source=source,
        module_source=module_source,
        source_hash=hashlib.sha256(module_source.encode()).hexdigest()[:16],
        launcher=getattr(module, "custom_kernel", None),
        is_user_file=is_user_file,
    )


# ---------------------------------------------------------------------------------------------- cases


CASE_KINDS = {"test": "tests", "tests": "tests", "bench": "benchmarks", "benchmark": "benchmarks",
              "benchmarks": "benchmarks"}


def pick_case(task: Task, spec: str | None) -> dict[str, Any]:
    """'test:N' / 'bench:N' -> that case of task.yml; None -> the first benchmark case (else the first test)."""
    if spec is None:
        cases = task.cases("benchmarks") or task.cases("tests")
        if not cases:
            raise UserError(f"task {task.name} lists no benchmark or test cases in task.yml: add one")
        return dict(cases[0])
    kind, _, index = spec.partition(":")
    if kind not in CASE_KINDS or not index.isdigit():
        raise UserError(f"case {spec!r} not understood: write test:N or bench:N (N counts from 0)")
    cases = task.cases(CASE_KINDS[kind])
    if int(index) >= len(cases):
        short = "test" if CASE_KINDS[kind] == "tests" else "bench"
        raise UserError(
            f"task {task.name} has {len(cases)} {CASE_KINDS[kind]} cases: pick {short}:0 to {short}:{len(cases) - 1}"
        )
    return dict(cases[int(index)])


def apply_sizes(items: Sequence[str], case: dict[str, Any]) -> dict[str, Any]:
    """Apply `NAME=VALUE` overrides to a case; values keep the type of the case's own value, numbers >= 1."""
    out = dict(case)
    for item in items:
        if "=" not in item:
            raise UserError(f"--size {item!r} is not NAME=VALUE: write e.g. --size m=4096")
        name, text = (part.strip() for part in item.split("=", 1))
        if name not in case or name == "seed":
            known = ", ".join(k for k in case if k != "seed")
            raise UserError(f"--size {name}: this task's sizes are {known}")
        current = case[name]
        try:
            if isinstance(current, bool):
                value: Any = text.lower() in ("1", "true", "yes")
            elif isinstance(current, int):
                value = int(text)
            elif isinstance(current, float):
                value = float(text)
            else:
                value = text
        except ValueError:
            kind = "a whole number" if isinstance(current, int) else "a number"
            raise UserError(f"--size {name}={text}: expected {kind}; give one NAME=VALUE per --size "
                            f"(--size {name}=VALUE --size OTHER=VALUE)") from None
        if not isinstance(value, bool) and isinstance(value, (int, float)) and value < 1:
            raise UserError(f"--size {name}={text}: sizes must be at least 1")
        out[name] = value
    return out


def _config(task: Task, module: ModuleType, name: str) -> Any:
    key = name.strip().lower()
    if key not in CONFIGS:
        raise UserError(f"config {name!r} unknown: use {', '.join(CONFIGS)}")
    if key == "backend":
        return None
    attr = CONFIGS[key]
    config = getattr(module, attr, None) or getattr(task.kernel, attr, None)
    if config is None and key == "gpu":
        return None  # a kernel without configurations sizes its grid itself
    if config is None:
        raise UserError(f"task {task.name}'s kernel has no {attr}: use --config gpu")
    return config


def _has_field(config: Any, name: str) -> bool:
    return is_dataclass(config) and name in {f.name for f in fields(config)}


def _with_k_dir(task: Task, config: Any, k_dir: str) -> Any:
    key = (k_dir or "forward").strip().lower()
    if key not in K_DIRS:
        raise UserError(f"--k-dir {k_dir!r} unknown: use {' or '.join(K_DIRS)}")
    if key == "forward":
        return config
    if not _has_field(config, "k_wave"):
        raise UserError(f"--k-dir {key}: task {task.name}'s kernel has no K-direction switch (matmul has one)")
    return replace(config, k_wave=K_DIRS[key])


def _with_wave_sync(task: Task, config: Any, wave_sync: bool) -> Any:
    if not wave_sync:
        return config
    if not _has_field(config, "sync_wave"):
        raise UserError(f"--wave-sync: task {task.name}'s kernel has no barrier between waves (matmul has one)")
    return replace(config, sync_wave=-1)


# size: every command and study builds its scenario here; each keyword is one of their options, passed by name.
def load_scenario(
    task: str | Path | Task,
    case: dict[str, Any] | str | None = None,
    sizes: Sequence[str] = (),
    target: str | Target = "h100",
    occupancy: int | None = None,
    kernel_file: str | Path | KernelFile | None = None,
    config: str = "gpu",
    gpu_name: str | None = None,
    outputs: Sequence[str] | None = None,
    k_dir: str = "forward",
    wave_sync: bool = False,
) -> Scenario:
    """The scenario every command works on. `case`: a dict, 'test:N' / 'bench:N', or None (the first benchmark);
    `sizes`: NAME=VALUE overrides; `target`: a --target name (or a resolved Target), `gpu_name` stands for the
    local GPU ('' = none, None = ask torch); `occupancy` None applies `default_occupancy`. `kernel_file` (a path,
    imported by userkernel.load_kernel_file, or the KernelFile it gave): the kernel with the swizzle site, and with
    the file's own tile_grid and swizzle_args when it is a task kernel module (KernelFile.is_task_kernel)."""
    loaded = task if isinstance(task, Task) else load_task(task)
    chosen = case if isinstance(case, dict) else pick_case(loaded, case)
    chosen = apply_sizes(sizes, dict(chosen))
    resolved = target if isinstance(target, Target) else resolve_target(target, gpu_name)
    module = loaded.kernel
    kernel = None
    given_path = None
    if kernel_file:
        kfile = kernel_file if isinstance(kernel_file, KernelFile) else load_kernel_file(kernel_file, resolved.model)
        given_path = kfile.path if isinstance(kernel_file, KernelFile) else Path(kernel_file)
        kernel = kernel_from_module(kfile.module, kfile.path, is_user_file=True)
        if kfile.is_task_kernel:
            module = kfile.module
    cfg = _with_wave_sync(loaded, _with_k_dir(loaded, _config(loaded, module, config), k_dir), wave_sync)
    sizes_only = {k: v for k, v in chosen.items() if k != "seed"}
    try:
        grid = tuple(int(g) for g in module.tile_grid(**sizes_only, config=cfg))
        args, consts = module.swizzle_args(**sizes_only, config=cfg)
    except TypeError as err:
        raise UserError(f"task {loaded.name}: sizes {sizes_only} do not fit its kernel ({err})") from None
    if module is loaded.kernel and len(grid) != loaded.spec.grid_rank:
        raise UserError(f"task {loaded.name}: tile_grid returned {grid} but task.yml says grid_rank: {loaded.spec.grid_rank}")
    if any(g < 1 for g in grid):
        raise UserError(f"task {loaded.name} {loaded.case_label(chosen)} has an empty tile grid {grid}: raise the sizes")
    if occupancy is None:
        occ = default_occupancy(module, resolved.model)
    else:
        if occupancy < 1:
            raise UserError(f"--occupancy {occupancy}: give at least 1 resident program per SM/CU")
        occ = Occupancy(int(occupancy), "given with --occupancy")
    return Scenario(
        task=loaded, case=dict(chosen), config_name=config.strip().lower(), config=cfg, grid=grid, args=dict(args),
        consts=dict(consts), target=resolved, occupancy=occ, kernel_module=module,
        kernel_file=given_path, _kernel=kernel,
        outputs=tuple(outputs) if outputs else None,
    )


# ---------------------------------------------------------------------------------------------- user kernels


def user_kernel_occupancy(user_kernel: Any, target: Target, resources: Any = None) -> Occupancy:
    """Programs per SM of a user kernel: from its compiled code's registers, shared memory and warps (compiled
    by the GPU here, else for the NVIDIA target without one, unless `resources` were read by another process);
    1, said to be assumed, when neither can be had."""
    from swizzlelab.userkernel.resources import kernel_resources

    why = ""
    if resources is None:
        resources, why = kernel_resources(user_kernel, target.local_gpu, target.model)
    if resources is None:
        return Occupancy(1, f"assumed: {why}; set --occupancy")
    programs = nvidia_blocks_per_sm(resources.n_regs, resources.shared_bytes, resources.num_warps)
    return Occupancy(programs, f"the compiled kernel's resources: {resources.text()}")


def scenario_from_user_kernel(
    user_kernel: Any, target: str | Target = "auto", occupancy: int | None = None, gpu_name: str | None = None,
    resources: Any = None,
) -> Scenario:
    """The scenario of a kernel file as people write it (swizzlelab.userkernel): tile grid, swizzle names and the
    trace all come from tracing that kernel through its own wrapper; the site is the one the finder took.
    `resources` (userkernel.resources.Resources): the compiled kernel's, when another process compiled it."""
    from swizzlelab.userkernel.launch import case_value
    from swizzlelab.userkernel.task import UserTask

    traced = user_kernel.trace()
    order = traced.order
    resolved = target if isinstance(target, Target) else resolve_target(target, gpu_name)
    if occupancy is None:
        occ = user_kernel_occupancy(user_kernel, resolved, resources)
    else:
        if occupancy < 1:
            raise UserError(f"--occupancy {occupancy}: give at least 1 resident program per SM/CU")
        occ = Occupancy(int(occupancy), "given with --occupancy")
    task = UserTask(user_kernel, rank=len(order.grid))
    kfile = user_kernel.kfile
    kernel = KernelInfo(
        jit_fn=user_kernel.marked.jit_fn,
        name=user_kernel.kernel.name,
        module=kfile.module,
        path=kfile.path,
        source=user_kernel.marked.source,  # swizzlelab's marked copy: the file itself is untouched
        module_source=kfile.module_source,
        source_hash=kfile.source_hash,
        launcher=task.custom_kernel,
        is_user_file=True,
    )
    arguments = user_kernel.launcher.arguments
    case: dict[str, Any] = {"seed": user_kernel.launcher.seed}
    case.update({k: case_value(v) for k, v in arguments.items()})
    case["config"] = user_kernel.choice.label()
    # names the kernel computes before its site (hoisted there in swizzlelab's marked copy, or already before
    # it) are runtime values, the same in every program, that formulas may read
    hoisted = dict(order.defined or {})
    if user_kernel.marked.launch_rank == 2:
        hoisted[N_AXIS0] = int(traced.launch_grid[0])
    return Scenario(
        task=task, case=case, config_name="user", config=user_kernel.choice, grid=tuple(order.grid),
        args={**order.args, **hoisted}, consts=dict(order.consts), target=resolved, occupancy=occ,
        kernel_module=kfile.module, kernel_file=kfile.path, _kernel=kernel, _trace=traced.trace,
        about=(*user_kernel.describe(), traced.describe()),
    )
