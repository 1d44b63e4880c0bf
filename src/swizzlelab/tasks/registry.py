"""Task registry: find task folders (built-in or a user's own), validate task.yml, load their modules.

A task folder holds task.yml, reference.py, kernel.py and optionally access.py; see tasks/README.md.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from swizzlelab.errors import UserError
from swizzlelab.io import load_module, module_name_for
from swizzlelab.runtime import ensure_triton_backend
from swizzlelab.swizzle import parse_order
from swizzlelab.tasks.checking import CheckResult, Tolerance, parse_tolerance

BUILTIN_DIR = Path(__file__).resolve().parent
SPEC_FILE = "task.yml"
REQUIRED_KEYS = ("description", "tests", "benchmarks", "tolerance", "ranking", "swizzle")
OPTIONAL_KEYS = ("name", "notes")
RANKINGS = ("geometric_mean",)
REFERENCE_FUNCTIONS = ("generate_input", "ref_kernel", "check", "baseline")
KERNEL_FUNCTIONS = ("custom_kernel", "tile_grid", "swizzle_args")
CASE_VALUE_TYPES = (bool, int, float, str)
SWIZZLE_KEYS = ("grid_rank", "default_order", "l2_bound")


@dataclass(frozen=True)
class TaskSpec:
    """The validated contents of a task.yml."""

    description: str
    tests: tuple[dict[str, Any], ...]
    benchmarks: tuple[dict[str, Any], ...]
    tolerance: Tolerance
    ranking: str
    grid_rank: int
    default_order: str
    raw: dict[str, Any] = field(repr=False, compare=False)
    l2_bound: bool = False


@dataclass(frozen=True)
class Task:
    """A loaded task: its spec plus the reference, kernel and (optional) access-model modules."""

    name: str
    path: Path
    spec: TaskSpec
    reference: ModuleType = field(repr=False)
    kernel: ModuleType = field(repr=False)
    access: ModuleType | None = field(default=None, repr=False)

    # -- cases ---------------------------------------------------------------------------------------------
    def cases(self, kind: str = "tests") -> tuple[dict[str, Any], ...]:
        """The test or benchmark cases of task.yml, each {seed, ...sizes}."""
        if kind not in ("tests", "benchmarks"):
            raise UserError(f"case kind {kind!r} is unknown: use 'tests' or 'benchmarks'")
        return self.spec.tests if kind == "tests" else self.spec.benchmarks

    @staticmethod
    def sizes(case: dict[str, Any]) -> dict[str, Any]:
        """A case without its seed: the keyword arguments of tile_grid / swizzle_args / access_model."""
        return {k: v for k, v in case.items() if k != "seed"}

    @staticmethod
    def case_label(case: dict[str, Any]) -> str:
        """A short human label such as 'm=37 n=53 dtype=float32 seed=1'."""
        sizes = " ".join(f"{k}={v}" for k, v in case.items() if k != "seed")
        return f"{sizes} seed={case.get('seed')}".strip()

    # -- reference -----------------------------------------------------------------------------------------
    def generate_input(self, case: dict[str, Any]) -> dict[str, Any]:
        """Fresh seeded inputs on the kernel device, with data['out'] preallocated."""
        return self.reference.generate_input(**case)

    def ref_kernel(self, data: dict[str, Any]) -> Any:
        """The trusted (slow is fine) output for `data`."""
        return self.reference.ref_kernel(data)

    def check(self, data: dict[str, Any], output: Any) -> CheckResult:
        """Compare a kernel's output with the reference output, within the task's tolerance."""
        return self.reference.check(data, output)

    def baseline(self, data: dict[str, Any]) -> Any:
        """The library implementation (torch) of the same computation, for 'baseline' report rows."""
        return self.reference.baseline(data)

    def extra_baselines(self) -> dict[str, tuple[str, Any]]:
        """Further library rows a ranked run times (reference.py's EXTRA_BASELINES: name -> (description, fn)),
        e.g. flash_attention's SDPA cuDNN backend, the fastest library kernel on Hopper."""
        return dict(getattr(self.reference, "EXTRA_BASELINES", {}) or {})

    # -- kernel --------------------------------------------------------------------------------------------
    def custom_kernel(self, data: dict[str, Any], order: Any = None, config: Any = None) -> Any:
        """Run the Triton kernel with `order` (a Formula, None = the kernel's own site) into data['out']."""
        if config is None:
            return self.kernel.custom_kernel(data, order)
        return self.kernel.custom_kernel(data, order, config=config)

    def tile_grid(self, case: dict[str, Any], config: Any = None) -> tuple[int, ...]:
        """The tile grid of one case (for `config`; default: the config of this process's backend)."""
        grid = tuple(int(g) for g in self.kernel.tile_grid(**self.sizes(case), config=config))
        if len(grid) != self.spec.grid_rank:
            raise UserError(
                f"task {self.name}: tile_grid returned {grid} but task.yml says grid_rank: {self.spec.grid_rank}"
            )
        return grid

    def n_programs(self, case: dict[str, Any], config: Any = None) -> int:
        """How many programs one launch of this case runs (the product of the tile grid)."""
        return math.prod(self.tile_grid(case, config))

    def swizzle_args(self, case: dict[str, Any], config: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(runtime scalars, constexprs) a formula may name at the kernel's site, for evaluate/prove."""
        return self.kernel.swizzle_args(**self.sizes(case), config=config)

    def parse_order(self, spec: str) -> Any:
        """A Formula from an order spec ('grouped:GROUP_M=8', 'xcd:NUM_XCDS=8', a .py file) for this grid."""
        return parse_order(spec, self.spec.grid_rank)

    # -- access model --------------------------------------------------------------------------------------
    @property
    def has_access_model(self) -> bool:
        return self.access is not None and hasattr(self.access, "access_model")

    def access_model(self, case: dict[str, Any], **options: Any) -> Any:
        """The analytic AccessTrace of one case (needs access.py in the task folder). The seed is passed along
        (models of data-dependent kernels such as spmv rebuild the input from it; others ignore it)."""
        if not self.has_access_model:
            raise UserError(
                f"task {self.name} has no analytic access model ({self.path / 'access.py'}): "
                "trace it with the interpreter instead"
            )
        trace = self.access.access_model(**case, **options)  # type: ignore[union-attr]
        if self.spec.l2_bound and hasattr(trace, "l2_bound"):
            trace = replace(trace, l2_bound=True)
        return trace


# -- discovery ---------------------------------------------------------------------------------------------
def builtin_names() -> list[str]:
    """Names of the task folders shipped with swizzlelab, sorted."""
    return sorted(p.name for p in BUILTIN_DIR.iterdir() if (p / SPEC_FILE).is_file())


def list_tasks() -> list[Task]:
    """Every built-in task, loaded, sorted by name."""
    return [load_task(name) for name in builtin_names()]


def load_task(name_or_path: str | Path) -> Task:
    """A built-in task by name, or a user's task folder by path; UserError listing the known tasks otherwise."""
    text = str(name_or_path)
    if text in builtin_names():
        return _load_folder(BUILTIN_DIR / text, package=f"swizzlelab.tasks.{text}")
    folder = Path(text).expanduser()
    if folder.is_file() and folder.name == SPEC_FILE:
        folder = folder.parent
    if folder.is_dir():
        if not (folder / SPEC_FILE).is_file():
            raise UserError(f"{folder} is not a task folder: it has no {SPEC_FILE} (see src/swizzlelab/tasks/README.md)")
        resolved = folder.resolve()
        if resolved.parent == BUILTIN_DIR:
            return _load_folder(resolved, package=f"swizzlelab.tasks.{resolved.name}")
        return _load_folder(resolved, package=None)
    raise UserError(
        f"unknown task {text!r}: known tasks are {', '.join(builtin_names())}; "
        "or give the path of a folder with task.yml, reference.py and kernel.py"
    )


# -- loading -----------------------------------------------------------------------------------------------
def _load_folder(folder: Path, package: str | None) -> Task:
    spec = load_spec(folder / SPEC_FILE)
    # Selects the interpreter without a GPU (and patches it so loops to a runtime bound work there).
    ensure_triton_backend()
    for needed in ("reference.py", "kernel.py"):
        if not (folder / needed).is_file():
            raise UserError(f"task folder {folder} has no {needed}: every task needs reference.py and kernel.py")
    reference = _import(folder, "reference", package)
    kernel = _import(folder, "kernel", package)
    access = _import(folder, "access", package) if (folder / "access.py").is_file() else None
    _require(reference, folder / "reference.py", REFERENCE_FUNCTIONS)
    _require(kernel, folder / "kernel.py", KERNEL_FUNCTIONS)
    return Task(name=folder.name, path=folder, spec=spec, reference=reference, kernel=kernel, access=access)


def _require(module: ModuleType, where: Path, names: tuple[str, ...]) -> None:
    missing = [n for n in names if not callable(getattr(module, n, None))]
    if missing:
        raise UserError(f"{where} lacks {', '.join(missing)}: a task's {where.name} must define {', '.join(names)}")


def _import(folder: Path, stem: str, package: str | None) -> ModuleType:
    if package is not None:
        return importlib.import_module(f"{package}.{stem}")
    # A user's folder gets a module name derived from its path, so two folders never share modules and
    # loading the same folder twice reuses the already-imported (and already-compiled) kernel.
    path = folder / f"{stem}.py"
    package_name = module_name_for(folder, "swizzlelab_user_task")
    return load_module(path, f"{package_name}.{stem}", what=f"cannot import {path}", reuse=True)


def load_spec(spec_path: Path) -> TaskSpec:
    """Parse and validate one task.yml; every defect is a UserError naming the file and the key."""
    try:
        raw = yaml.safe_load(spec_path.read_text())
    except OSError as err:
        raise UserError(f"cannot read {spec_path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise UserError(f"{spec_path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{spec_path} must be a YAML mapping with keys {', '.join(REQUIRED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise UserError(f"{spec_path} lacks {', '.join(missing)}: a task.yml needs {', '.join(REQUIRED_KEYS)}")
    unknown = [k for k in raw if k not in REQUIRED_KEYS + OPTIONAL_KEYS]
    if unknown:
        raise UserError(f"{spec_path}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    if not isinstance(raw["description"], str) or not raw["description"].strip():
        raise UserError(f"{spec_path}: description must be a non-empty string")
    if raw["ranking"] not in RANKINGS:
        raise UserError(f"{spec_path}: ranking {raw['ranking']!r} is not supported; use one of {', '.join(RANKINGS)}")
    swizzle = raw["swizzle"]
    if not isinstance(swizzle, dict) or swizzle.get("grid_rank") not in (1, 2):
        raise UserError(f"{spec_path}: swizzle must be a mapping with grid_rank: 1 or 2 (the tile grid's rank)")
    unknown_swizzle = [k for k in swizzle if k not in SWIZZLE_KEYS]
    if unknown_swizzle:
        raise UserError(f"{spec_path}: swizzle has unknown key(s) {', '.join(map(str, unknown_swizzle))}; allowed: "
                        f"{', '.join(SWIZZLE_KEYS)}")
    if not isinstance(swizzle.get("l2_bound", False), bool):
        raise UserError(f"{spec_path}: swizzle.l2_bound must be true or false (whether the kernel runs near the L2's "
                        f"bandwidth), got {swizzle['l2_bound']!r}")
    return TaskSpec(
        description=" ".join(raw["description"].split()),
        tests=_cases(raw["tests"], "tests", spec_path),
        benchmarks=_cases(raw["benchmarks"], "benchmarks", spec_path),
        tolerance=parse_tolerance(raw["tolerance"], spec_path),
        ranking=raw["ranking"],
        grid_rank=int(swizzle["grid_rank"]),
        default_order=" ".join(str(swizzle.get("default_order", "row-major over the tile grid")).split()),
        raw=raw,
        l2_bound=bool(swizzle.get("l2_bound", False)),
    )


def _cases(raw: Any, key: str, spec_path: Path) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{spec_path}: {key} must be a non-empty list of cases such as {{seed: 1, m: 37, n: 53}}")
    cases = []
    for i, case in enumerate(raw):
        if not isinstance(case, dict):
            raise UserError(f"{spec_path}: {key}[{i}] must be a mapping such as {{seed: 1, m: 37, n: 53}}")
        seed = case.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UserError(f"{spec_path}: {key}[{i}] needs an integer seed, got {seed!r}")
        bad = [k for k, v in case.items() if not isinstance(v, CASE_VALUE_TYPES)]
        if bad:
            raise UserError(f"{spec_path}: {key}[{i}] values must be numbers or strings; fix {', '.join(bad)}")
        cases.append(dict(case))
    return tuple(cases)
