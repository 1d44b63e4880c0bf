"""Trace a user kernel through its own wrapper under the interpreter and lay the accesses out per tile
(the kernel's own order undone, persistent programs split into their tile iterations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.trace.trace import AccessTrace
from swizzlelab.trace.tracer import LaunchRecord, _Program, _run_guarded, record_accesses
from swizzlelab.userkernel.launch import Launcher
from swizzlelab.userkernel.tiles import OwnOrder, SiteSpan, own_order


@dataclass(frozen=True)
class UserTrace:
    """A user kernel's trace on its tile grid and the order it runs its tiles in."""

    trace: AccessTrace
    order: OwnOrder
    launch_grid: tuple[int, int, int]
    n_programs: int

    def describe(self) -> str:
        tensors = ", ".join(t.name for t in self.trace.tensors)
        kind = "tile iterations of persistent programs" if self.order.iterations is not None else "programs"
        return (f"traced the kernel itself under the Triton interpreter: launch grid {self.launch_grid}, "
                f"{self.order.perm.size} {kind} on tile grid {'x'.join(map(str, self.order.grid))}, "
                f"{self.trace.lines.size} line accesses to {tensors}")


def launch_values(kernel_params: tuple[str, ...], constexprs: tuple[str, ...],
                  bound: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """(runtime integer args, integer constexprs) of one launch, from its bound arguments."""
    args: dict[str, int] = {}
    consts: dict[str, int] = {}
    for name in kernel_params:
        value = bound.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            continue
        (consts if name in constexprs else args)[name] = int(value)
    return args, consts


def _split_iterations(program: _Program, count: int) -> list[list[list[Any]]]:
    """A persistent program's steps cut into `count` tile iterations: each iteration ends with its stores."""
    steps = [s for s in program.steps if s]
    if count == 0:
        return []
    cuts = [i + 1 for i, step in enumerate(steps) if any(op.is_write for op in step)]
    if cuts and cuts[-1] != len(steps):
        cuts[-1] = len(steps)  # trailing loads after the last store belong to the last tile
    if len(cuts) == count:
        bounds = [0] + cuts
        return [steps[bounds[j]:bounds[j + 1]] for j in range(count)]
    if steps and len(steps) % count == 0:
        size = len(steps) // count
        return [steps[j * size:(j + 1) * size] for j in range(count)]
    raise UserError(
        f"a persistent program ran {count} tile iterations but its {len(steps)} memory steps do not split into "
        "them (no single store per tile): swizzlelab cannot tell its tiles apart"
    )


def trace_user_kernel(launcher: Launcher, site: SiteSpan, source: str | None = None,
                      real_tensors: frozenset[str] = frozenset()) -> UserTrace:
    """Run the wrapper once under the recording interpreter and return the per-tile trace; `site` lies in
    `source` (the kernel's source by default; swizzlelab's marked copy of it)."""
    name = launcher.kernel.jit_fn.fn.__name__
    with record_accesses(True, real_tensors) as recorder:
        with launcher.forced() as proxy:
            _run_guarded(lambda: launcher.wrapper(**launcher.arguments), f"{launcher.wrapper.__name__}(...)")
    mine = [r for r in recorder.launches if r.kernel_name == name]
    if len(mine) != 1 or len(proxy.calls) != 1:
        raise UserError(
            f"{launcher.wrapper.__name__} launched {name} {len(mine)} times: swizzlelab traces one launch; "
            "use a wrapper that launches it once"
        )
    record = mine[0]
    args, consts = launch_values(launcher.kernel.params, launcher.kernel.constexprs, proxy.calls[0])
    order = own_order(source or launcher.kernel.source, site, record.launch_grid, args, consts)
    n_tiles = int(order.perm.size)
    by_tile: list[_Program | None] = [None] * n_tiles
    if order.iterations is None:
        for launch_index, program in enumerate(record.programs):
            by_tile[int(order.perm[launch_index])] = program
    else:
        for program, indices in zip(record.programs, order.iterations):
            for index, steps in zip(indices, _split_iterations(program, int(indices.size))):
                by_tile[int(order.perm[int(index)])] = _Program(steps=steps)
    tiled = LaunchRecord(record.kernel_name, record.launch_grid, record.tensors, [p or _Program() for p in by_tile])
    meta = {"kernel_file": str(launcher.kfile.path), "config": launcher.choice.label()}
    trace = tiled.to_trace(order.grid, meta)
    return UserTrace(trace, order, tuple(record.launch_grid), len(record.programs))
