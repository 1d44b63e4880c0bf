"""Correctness of a kernel on one task case: fresh seeded inputs, a poisoned output buffer, the task's check,
and a second run on inputs of another seed so that a kernel returning a cached result fails.
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from swizzlelab.runtime import device

# Integer poison: a value no task output plausibly holds; for narrow integer types the dtype's extreme.
INT_POISON = -0x5A5A5A5A


@dataclass
class RunCheck:
    """The verdict on one kernel run on inputs of one seed."""

    seed: int
    passed: bool
    message: str
    n_bad: int = 0
    max_abs_err: float = 0.0
    worst_index: tuple[int, ...] | None = None
    n_poisoned: int = 0  # elements of the output still holding the poison value (never written)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "passed": self.passed,
            "message": self.message,
            "n_bad": self.n_bad,
            "max_abs_err": self.max_abs_err if np.isfinite(self.max_abs_err) else None,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
            "n_poisoned": self.n_poisoned,
        }


@dataclass
class CaseResult:
    """Correctness of one case: a run on the case's seed and, unless disabled, one on a derived seed."""

    case: dict[str, Any]
    runs: list[RunCheck] = field(default_factory=list)
    order: dict[str, Any] = field(default_factory=dict)  # grid / permutation id of the order run (reports)

    @property
    def passed(self) -> bool:
        return bool(self.runs) and all(run.passed for run in self.runs)

    @property
    def message(self) -> str:
        failed = [run for run in self.runs if not run.passed]
        if not failed:
            return f"passed on seeds {', '.join(str(r.seed) for r in self.runs)}"
        run = failed[0]
        return f"seed {run.seed}: {run.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": dict(self.case),
            "passed": self.passed,
            "message": self.message,
            "runs": [run.to_dict() for run in self.runs],
            "order": dict(self.order),
        }


def derive_seed(seed: int, salt: str) -> int:
    """A different, reproducible seed for the same case (e.g. salt 'recheck' or 'ranked'); never equal to seed."""
    digest = hashlib.sha256(f"{int(seed)}|{salt}".encode()).digest()
    derived = int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
    return derived if derived != int(seed) else derived ^ 1


def case_sizes(case: dict[str, Any]) -> dict[str, Any]:
    """A case without its seed: the keyword arguments for generate_input / tile_grid."""
    return {key: value for key, value in case.items() if key != "seed"}


def poison_value(dtype: Any) -> float | int | bool:
    """The value the output buffer is filled with before a run: NaN for floats, a sentinel for integers."""
    import torch

    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    if info.min <= INT_POISON <= info.max:
        return INT_POISON
    return info.min if info.min < 0 else info.max


def poison_(tensor: Any) -> None:
    """Fill a torch tensor with its poison value, in place (other objects are left alone)."""
    import torch

    if isinstance(tensor, torch.Tensor) and tensor.numel() > 0:
        tensor.fill_(poison_value(tensor.dtype))


def count_poisoned(output: Any, expected_poison_dtype: Any) -> tuple[int, tuple[int, ...] | None]:
    """How many elements of `output` hold the poison value, and the index of the first one."""
    import torch

    if not isinstance(output, torch.Tensor) or output.dtype != expected_poison_dtype or output.numel() == 0:
        return 0, None
    if output.dtype == torch.bool:
        return 0, None  # a bool buffer cannot be told apart from a written True
    value = poison_value(output.dtype)
    flat = output.detach().reshape(-1)
    mask = torch.isnan(flat) if isinstance(value, float) else flat == value
    count = int(mask.sum().item())
    if count == 0:
        return 0, None
    first = int(torch.nonzero(mask)[0].item())
    index = tuple(int(i) for i in np.unravel_index(first, tuple(output.shape)))
    return count, index


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return (text[0] if text else type(err).__name__)[:300] + where


def _synchronize() -> None:
    if device() == "cuda":
        import torch

        torch.cuda.synchronize()


def check_run(task: Any, fn: Callable[[Any], Any], seed: int, sizes: dict[str, Any]) -> RunCheck:
    """Run `fn` once on fresh inputs of `seed` with data['out'] poisoned and judge its output."""
    data = task.generate_input({"seed": int(seed), **sizes})
    out_buffer = data.get("out") if isinstance(data, dict) else None
    poison_dtype = getattr(out_buffer, "dtype", None)
    poison_(out_buffer)
    try:
        output = fn(data)
        _synchronize()
    except Exception as err:  # a crashing kernel is a failed case, reported in one line
        return RunCheck(seed=seed, passed=False, message=f"the kernel raised {_one_line(err)}",
                        n_bad=-1, max_abs_err=float("inf"))
    try:
        verdict = task.check(data, output)
    except Exception as err:
        return RunCheck(seed=seed, passed=False, message=f"the check raised {_one_line(err)}",
                        n_bad=-1, max_abs_err=float("inf"))
    n_poisoned, first_poisoned = count_poisoned(output, poison_dtype)
    ok = bool(getattr(verdict, "ok", verdict))
    message = str(getattr(verdict, "message", "passed" if ok else "failed"))
    if n_poisoned and not ok:
        what = "NaN (unwritten, or NaN computed)" if poison_dtype is not None and poison_dtype.is_floating_point \
            else "the poison value (never written)"
        message += f"; {n_poisoned} elements still hold {what}, first at {first_poisoned}"
    return RunCheck(
        seed=seed,
        passed=ok,
        message=message,
        n_bad=int(getattr(verdict, "n_bad", 0 if ok else -1)),
        max_abs_err=float(getattr(verdict, "max_abs_err", 0.0)),
        worst_index=getattr(verdict, "worst_index", None),
        n_poisoned=n_poisoned,
    )


def check_correctness(
    task: Any, fn: Callable[[Any], Any], case: dict[str, Any], recheck: bool = True, seed: int | None = None
) -> CaseResult:
    """Check `fn` on `case`: inputs from the case's seed (or `seed`), then, when `recheck`, again on inputs of a
    derived seed, so a kernel that caches its first result fails the second run."""
    first_seed = int(case.get("seed", 0) if seed is None else seed)
    sizes = case_sizes(case)
    result = CaseResult(case=dict(case))
    result.runs.append(check_run(task, fn, first_seed, sizes))
    if recheck and result.runs[0].passed:
        result.runs.append(check_run(task, fn, derive_seed(first_seed, "recheck"), sizes))
    return result
