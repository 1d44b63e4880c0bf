"""Shared output checks for task references: compare a kernel's output with the expected one element-wise.

Every task's reference.check() calls `compare`, so all tasks report mismatches in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from swizzlelab.errors import UserError


@dataclass(frozen=True)
class Tolerance:
    """An element passes when |out - expected| <= atol + rtol * |expected| (integers: atol only)."""

    rtol: float
    atol: float


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one output: `message` is one line a user can act on."""

    ok: bool
    message: str
    n_bad: int
    max_abs_err: float
    worst_index: tuple[int, ...] | None

    def __bool__(self) -> bool:
        return self.ok


def tolerance_for(module_file: str | Path) -> Tolerance:
    """The tolerance in the task.yml next to a task's reference.py (one source of truth per task)."""
    spec_path = Path(module_file).resolve().parent / "task.yml"
    try:
        spec = yaml.safe_load(spec_path.read_text()) or {}
    except OSError as err:
        raise UserError(f"cannot read {spec_path}: {err.strerror}; every task folder needs a task.yml") from None
    return parse_tolerance(spec.get("tolerance"), spec_path)


def parse_tolerance(raw: Any, where: str | Path) -> Tolerance:
    """A Tolerance from a task.yml `tolerance:` mapping; UserError naming the file when it is malformed."""
    if not isinstance(raw, dict) or set(raw) != {"rtol", "atol"}:
        raise UserError(f"{where}: `tolerance` must be a mapping with exactly rtol and atol, e.g. {{rtol: 0, atol: 0}}")
    try:
        rtol, atol = float(raw["rtol"]), float(raw["atol"])
    except (TypeError, ValueError):
        raise UserError(f"{where}: tolerance rtol and atol must be numbers, got {raw!r}") from None
    if rtol < 0 or atol < 0:
        raise UserError(f"{where}: tolerance rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    return Tolerance(rtol=rtol, atol=atol)


def _fail(message: str) -> CheckResult:
    return CheckResult(ok=False, message=message, n_bad=-1, max_abs_err=float("inf"), worst_index=None)


def _wide(tensor: Any) -> Any:
    import torch  # start-up: commands that never compare tensors do not load torch

    # fp32 holds every fp16/bf16 value exactly and int64 every integer output; both keep the check on-device.
    return tensor.to(torch.float32) if tensor.is_floating_point() else tensor.to(torch.int64)


def _format(value: float | int) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def compare(output: Any, expected: Any, tolerance: Tolerance, name: str = "out") -> CheckResult:
    """Element-wise comparison of `output` with `expected` within `tolerance`; never raises on bad output."""
    import torch  # start-up: commands that never compare tensors do not load torch

    if not isinstance(output, torch.Tensor):
        return _fail(f"{name}: the kernel returned {type(output).__name__}, expected a torch.Tensor")
    if tuple(output.shape) != tuple(expected.shape):
        return _fail(f"{name}: shape {tuple(output.shape)} differs from the expected {tuple(expected.shape)}")
    if output.dtype != expected.dtype:
        return _fail(f"{name}: dtype {output.dtype} differs from the expected {expected.dtype}")
    got = _wide(output.detach()).to(expected.device)
    want = _wide(expected.detach())
    if got.numel() == 0:
        return CheckResult(ok=True, message=f"{name}: empty output matches", n_bad=0, max_abs_err=0.0, worst_index=None)
    if got.is_floating_point():
        err = (got - want).abs()
        allowed = tolerance.atol + tolerance.rtol * want.abs()
        # NaN compares false, so a NaN (e.g. the harness's poison left unwritten) counts as bad explicitly.
        bad = ~(err <= allowed) & ~(torch.isnan(got) & torch.isnan(want))
        err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
        err = torch.where(torch.isnan(got) & torch.isnan(want), torch.zeros_like(err), err)
        score = err - allowed
    else:
        err = (got - want).abs()
        bad = err > tolerance.atol
        score = err
    n_bad = int(bad.sum().item())
    max_abs_err = float(err.max().item())
    flat_worst = int(torch.argmax(torch.where(bad, score, torch.full_like(score, -1)) if n_bad else err).item())
    worst_index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_worst), tuple(got.shape)))
    if n_bad == 0:
        return CheckResult(
            ok=True,
            message=f"{name}: all {got.numel()} elements match (max abs err {_format(max_abs_err)})",
            n_bad=0,
            max_abs_err=max_abs_err,
            worst_index=worst_index,
        )
    got_value = output.detach()[worst_index].item()
    want_value = expected.detach()[worst_index].item()
    return CheckResult(
        ok=False,
        message=(
            f"{name}: {n_bad} of {got.numel()} elements differ beyond rtol={tolerance.rtol:g}, "
            f"atol={tolerance.atol:g}; worst at {worst_index}: got {_format(got_value)}, "
            f"expected {_format(want_value)}"
        ),
        n_bad=n_bad,
        max_abs_err=max_abs_err,
        worst_index=worst_index,
    )
