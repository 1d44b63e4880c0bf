"""A task-shaped view of a user kernel, so scenario/optimize/harness code that asks a task for inputs, a
launcher and a check works unchanged: inputs are the wrapper's arguments, the check compares with the kernel's
own order on the same inputs (reordering tiles must not change a single output element).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    message: str


@dataclass
class UserTask:
    """Stands in for a swizzlelab task when the kernel is the user's own file (a tasks.KernelTask).

    Outputs are what the wrapper returns and the tensor arguments it writes in place (a `matmul(a, b, c)` that
    fills `c` returns None): those are found once by a run on copies of the inputs, and every input
    generate_input hands out is a fresh copy with them poisoned (NaN, or the dtype's minimum), so an order
    that leaves part of an output unwritten shows, and no run sees another's result."""

    user_kernel: Any  # swizzlelab.userkernel.UserKernel
    rank: int
    has_access_model: bool = False
    access: Any = None
    _reference: Any = field(default=None, repr=False)
    _written: tuple[str, ...] | None = field(default=None, repr=False)
    _terms: Any = field(default=None, repr=False)  # userkernel.terms.GridTerms, checked at the traced launch

    @property
    def name(self) -> str:
        return f"{self.user_kernel.kfile.path.stem}:{self.user_kernel.name}"

    @staticmethod
    def case_label(case: dict[str, Any]) -> str:
        return " ".join(f"{k}={v}" for k, v in case.items() if k != "seed")

    def parse_order(self, spec: str) -> Any:
        from swizzlelab.swizzle import parse_order

        return parse_order(spec, self.rank)

    def in_kernel_terms(self, formula: Any) -> Any:
        """`formula` reading the kernel's own names for the tile counts (userkernel.terms), those checked against
        the traced launch's tile grid first."""
        if self._terms is None:
            order = self.user_kernel.trace().order
            values = {**order.args, **(order.defined or {}), **order.consts}
            self._terms = self.user_kernel.terms.checked(values, tuple(order.grid))
        return self._terms.rewrite(formula)

    @property
    def written(self) -> tuple[str, ...]:
        """The wrapper's tensor arguments (list members as NAME[i]) the kernel's own order writes."""
        if self._written is None:
            pristine = self.user_kernel.launcher.arguments
            data = _copied(pristine)
            self.user_kernel.launcher(None, data)
            self._written = tuple(key for key, tensor in _tensors(data) if not _same_bytes(tensor, _lookup(pristine, key)))
        return self._written

    def generate_input(self, case: dict[str, Any] | None = None) -> dict[str, Any]:
        """The wrapper's keyword arguments: the same seeded inputs every time, fresh copies, written ones
        poisoned."""
        data = _copied(self.user_kernel.launcher.arguments)
        for key in self.written:
            _poison(_lookup(data, key))
        return data

    def custom_kernel(self, data: dict[str, Any], order: Any = None, config: Any = None) -> Any:
        """Run the wrapper with the kernel in `order` (None: its own). `config` may only be the configuration the
        kernel was opened with (its scenario's), which the launcher already carries."""
        if config is not None and config is not self.user_kernel.choice:
            raise UserError("a kernel file runs with the configuration it was opened with: open it again with "
                            "another --config to change it")
        _poison_allocator(self._reference)
        return self.user_kernel.launcher(order, data)

    def outputs(self, data: dict[str, Any], returned: Any) -> tuple[Any, ...]:
        """What a run produced: the tensors it returned, then the arguments it wrote in place."""
        outs = returned if isinstance(returned, (tuple, list)) else (returned,)
        return tuple(o for o in outs if o is not None) + tuple(_lookup(data, key) for key in self.written)

    def ref_kernel(self, data: dict[str, Any]) -> Any:
        """The kernel's own order's outputs, from its own fresh inputs (cached)."""
        if self._reference is None:
            own = self.generate_input()
            self._reference = self.outputs(own, self.user_kernel.launcher(None, own))
        return self._reference

    def check(self, data: dict[str, Any], output: Any) -> CheckResult:
        """Equal to the kernel's own order, element for element (NaN where NaN)."""
        import torch

        refs = self.ref_kernel(data)
        outs = self.outputs(data, output)
        if not any(isinstance(r, torch.Tensor) for r in refs):
            return CheckResult(False, "the kernel's own order produced no tensor (returned none, wrote none): "
                                      "nothing to compare")
        if len(outs) != len(refs):
            return CheckResult(False, f"produced {len(outs)} outputs, the kernel's own order {len(refs)}")
        for i, (out, ref) in enumerate(zip(outs, refs)):
            if not isinstance(ref, torch.Tensor):
                continue
            if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                return CheckResult(False, f"output {i} is {shape}, expected {tuple(ref.shape)}")
            same = torch.eq(out, ref) | (torch.isnan(out) & torch.isnan(ref)) if out.is_floating_point() else torch.eq(out, ref)
            if not bool(same.all()):
                bad = int((~same).sum())
                return CheckResult(False, f"output {i}: {bad} of {out.numel()} elements differ from the kernel's own order")
        return CheckResult(True, "identical to the kernel's own order")


def _tensors(data: dict[str, Any]) -> list[tuple[str, Any]]:
    import torch

    out = []
    for name, value in data.items():
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return out


def _lookup(data: dict[str, Any], key: str) -> Any:
    name, _, index = key.partition("[")
    return data[name][int(index.rstrip("]"))] if index else data[name]


def _copied(data: dict[str, Any]) -> dict[str, Any]:
    import torch

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return type(value)(copy(v) for v in value)
        return value

    return {name: copy(value) for name, value in data.items()}


def _stored(t: Any) -> list[Any]:
    """The dense tensors that hold `t`'s data: itself, or a sparse tensor's indices and values (a wrapper hands
    a kernel those, never the sparse tensor: its storage has no one pointer)."""
    import torch

    if t.layout == torch.strided:
        return [t]
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    compressed = (t.crow_indices(), t.col_indices()) if t.layout in (torch.sparse_csr, torch.sparse_bsr) else \
        (t.ccol_indices(), t.row_indices())
    return [*compressed, t.values()]


def _same_bytes(a: Any, b: Any) -> bool:
    """Bit for bit (garbage NaNs of a torch.empty output compare as what they are)."""
    import torch

    def raw(t: Any) -> Any:
        return t.detach().reshape(-1).contiguous().view(torch.uint8) if t.numel() else t.reshape(-1)

    return a.shape == b.shape and a.layout == b.layout and all(
        x.shape == y.shape and bool(torch.equal(raw(x), raw(y))) for x, y in zip(_stored(a), _stored(b)))


def _poison(tensor: Any) -> None:
    import torch

    if tensor.layout != torch.strided:
        tensor = _stored(tensor)[-1]
    if tensor.is_floating_point():
        tensor.fill_(float("nan"))
    elif tensor.dtype != torch.bool:
        tensor.fill_(torch.iinfo(tensor.dtype).min)


def _poison_allocator(reference: Any) -> None:
    """Hand the caching allocator a NaN-filled block of each output's size, so a wrapper's torch.empty output
    that the kernel fails to write holds NaN instead of a previous run's correct result."""
    import torch

    refs = reference if isinstance(reference, (tuple, list)) else (reference,)
    for ref in refs:
        if isinstance(ref, torch.Tensor) and ref.is_floating_point():
            block = torch.full_like(ref, float("nan"))
            del block


def require_user_task(task: Any) -> UserTask:
    if not isinstance(task, UserTask):
        raise UserError("this needs a kernel file opened with swizzlelab.userkernel")
    return task
