"""Trace a user kernel through its own wrapper at its real size and lay the accesses out per tile (the kernel's
own order undone, persistent programs split into their tile iterations): derived from a few programs
interpreted under the Triton interpreter (trace.derive) where an affine fit holds and checks, else the task's access
model where a sample of programs matches it (userkernel.model_check), else all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes, fmt_seconds, grid_text
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.trace.derive import (
    BYTES_PER_ACCESS, Derivation, NotDerivable, TileOps, derive_trace, estimate_accesses, plan_programs, tile_ops,
)
from swizzlelab.trace.access_trace import AccessTrace
from swizzlelab.trace.tracer import AccessRecorder, LaunchRecord, _Program, run_guarded, record_accesses
from swizzlelab.userkernel.launch import Launcher
from swizzlelab.userkernel.model_check import ModelMismatch, TaskModel, check_against_model, sample_programs
from swizzlelab.userkernel.shim import asked
from swizzlelab.userkernel.tiles import OwnOrder, SiteSpan, own_order


@dataclass(frozen=True)
class HowTraced:
    """How a trace was obtained, for the user to read next to the figures it leads to."""

    derivation: Derivation | None  # None: every program was interpreted
    reason: str  # why not derived ("" when derived)
    interpreted_programs: int  # programs run under the interpreter for the trace (the launch survey not counted)
    persistent: bool
    seconds: float
    launches: int  # launches of the kernel the wrapper made
    launch_index: int  # the one traced (0-based)
    model: str = ""  # the task whose access model gave the trace, checked against the interpreted programs

    def describe(self) -> str:
        unit = "tile iterations" if self.persistent else "programs"
        d = self.derivation
        if self.model:
            text = (f"task access model ({self.model}), checked against {self.interpreted_programs} interpreted "
                    f"programs: the trace cannot be derived ({self.reason})")
        elif d is not None and not d.fit_tiles:
            text = f"interpreted every one of its {d.exact_tiles} {unit} (too few to derive the trace from a sample)"
        elif d is not None:
            text = f"derived from {d.fit_tiles} interpreted {unit}, checked against {d.checked_tiles} more"
            if d.exact_tiles:
                text += f" ({d.exact_tiles} more at the grid's edges taken as interpreted)"
            if self.persistent:
                text += f"; {self.interpreted_programs} persistent programs interpreted"
        else:
            text = f"fully interpreted ({self.interpreted_programs} programs): {self.reason}"
        return f"{text}; traced in {self.seconds:.1f} s (measured, this CPU)"


@dataclass(frozen=True)
class UserTrace:
    """A user kernel's trace on its tile grid and the order it runs its tiles in."""

    trace: AccessTrace
    order: OwnOrder
    launch_grid: tuple[int, int, int]
    n_programs: int
    how: HowTraced | None = None
    sizes: str = ""  # the launch's tensor arguments, "a_ptr 8192x8192 float16, ..."
    # device queries the file made while it launched (query -> answer), answered for the target by the shim
    asked: dict[str, str] | None = None
    target: str = ""

    def describe(self) -> str:
        tensors = ", ".join(t.name for t in self.trace.tensors)
        kind = "tile iterations of persistent programs" if self.order.iterations is not None else "programs"
        lines = [f"traced the kernel itself under the Triton interpreter at its real size ({self.sizes}): launch "
                 f"grid {self.launch_grid}, {self.order.perm.size} {kind} on tile grid {grid_text(self.order.grid)}, "
                 f"{self.trace.lines.size:,} line accesses to {tensors}"]
        if self.how is not None:
            lines.append(f"  trace {self.how.describe()}")
            if self.how.launches > 1:
                lines.append(f"  the wrapper launched the kernel {self.how.launches} times; traced launch "
                             f"{self.how.launch_index + 1}, the one with the most programs (the last of equals)")
        if self.asked:
            shown = ", ".join(f"{query} = {answer}" for query, answer in self.asked.items())
            lines.append(f"  the file asked the device while it launched; answered for the target {self.target}, not "
                         f"this host: {shown}")
        return "\n".join(lines)


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


def _tiles_of(record: LaunchRecord, order: OwnOrder, programs: Collection[int]) -> dict[int, list[list[Any]]]:
    """Row-major tile -> its steps, for the given programs of the launch (in that order)."""
    out: dict[int, list[list[Any]]] = {}
    for launch_index in programs:
        program = record.programs.get(int(launch_index)) or _Program()
        if order.iterations is None:
            out[int(order.perm[launch_index])] = program.steps
            continue
        indices = order.iterations[launch_index]
        for index, steps in zip(indices, _split_iterations(program, int(indices.size))):
            out[int(order.perm[int(index)])] = steps
    return out


def _run(launcher: Launcher, name: str, mine: Callable[[int], Collection[int] | None],
         real_tensors: frozenset[str], describe: bool = False) -> tuple[AccessRecorder, list[LaunchRecord], list]:
    """Run the wrapper once; `mine(k)` says which programs of the kernel's k-th launch run (other kernels run
    whole). Returns the recorder, the kernel's launches and each launch's bound arguments."""
    def choose(kernel_name: str, before: int, grid: tuple[int, int, int]) -> Collection[int] | None:
        return mine(before) if kernel_name == name else None

    with record_accesses(True, real_tensors, choose=choose, describe=describe) as recorder:
        with launcher.forced() as proxy:
            run_guarded(lambda: launcher.wrapper(**launcher.arguments), f"{launcher.wrapper.__name__}(...)")
    return recorder, [r for r in recorder.launches if r.kernel_name == name], list(proxy.calls)


def _pick_launch(launches: list[LaunchRecord]) -> int:
    """The launch with the most programs; the last of equals (a warm-up launch comes first)."""
    sizes = [r.n_programs for r in launches]
    return max(range(len(sizes)), key=lambda i: (sizes[i], i))


def _same_launch(launches: list[LaunchRecord], pick: int, grid: tuple[int, int, int], wrapper: str) -> LaunchRecord:
    if len(launches) <= pick or launches[pick].launch_grid != grid:
        raise UserError(f"{wrapper} launched the kernel differently when run again (launch {pick + 1}, grid {grid}): "
                        "swizzlelab runs the wrapper more than once and needs the same launches each time")
    return launches[pick]


def trace_user_kernel(launcher: Launcher, site: SiteSpan, source: str | None = None,
                      real_tensors: frozenset[str] = frozenset(), *, derive: bool = True,
                      max_interpret_s: float | None = None, task_model: TaskModel | None = None) -> UserTrace:
    """The per-tile trace of the user's kernel at the size the wrapper's arguments give; `site` lies in `source`
    (the kernel's source by default; swizzlelab's marked copy of it). The wrapper runs first with every program
    skipped, to learn its launches (the one with the most programs is traced), then with the programs
    trace.derive asks for; when the fit fails, the task's access model stands for the kernel (`task_model`) if a
    sample of its programs accesses exactly what the model says, else all of that launch's programs are
    interpreted: refused first when that would not fit in memory, or take longer than `max_interpret_s` at the
    sampled programs' pace."""
    start = time.perf_counter()
    name = launcher.kernel.jit_fn.fn.__name__
    wrapper = f"{launcher.wrapper.__name__}(...)"
    with asked() as queries:
        _, survey, calls = _run(launcher, name, lambda before: (), real_tensors)
    if not survey:
        raise UserError(f"{wrapper} never launched {name}: swizzlelab traces the kernel through that wrapper")
    if len(calls) != len(survey):
        raise UserError(
            f"{wrapper} launched {name} {len(survey)} times, {len(calls)} of them through the name {name} of its "
            "module: swizzlelab forces the chosen config through that name, so launch the kernel by it")
    pick = _pick_launch(survey)
    grid = survey[pick].launch_grid
    args, consts = launch_values(launcher.kernel.params, launcher.kernel.constexprs, calls[pick])
    order = own_order(source or launcher.kernel.source, site, grid, args, consts)
    meta = {"kernel_file": str(launcher.kfile.path), "config": launcher.choice.label()}
    trace: AccessTrace | None = None
    derivation: Derivation | None = None
    reason, estimate, interpreted, pace = "derivation switched off", 0, 0, None
    modelled = ""
    if derive:
        try:
            derivation, interpreted = _derived(launcher, name, pick, grid, order, real_tensors, meta)
            trace = derivation.trace
        except _Fallback as err:
            reason, estimate, pace = err.reason, err.estimate, err.seconds_per_program
        if trace is None and task_model is not None:
            try:
                trace, interpreted = _modelled(launcher, name, pick, grid, order, real_tensors, task_model, meta)
                modelled = task_model.task
            except ModelMismatch as err:
                reason = f"{reason}; the {task_model.task} task's access model {err}"
    if trace is None:
        _refuse_large(estimate, reason)
        _refuse_slow(pace, survey[pick].n_programs, max_interpret_s, reason)
        _, launches, _ = _run(launcher, name, lambda before: None if before == pick else (), real_tensors)
        record = _same_launch(launches, pick, grid, wrapper)
        by_tile = _tiles_of(record, order, range(record.n_programs))
        n_tiles = int(order.perm.size)
        tiled = LaunchRecord(record.kernel_name, (n_tiles, 1, 1), record.tensors,
                             {tile: _Program(steps=steps) for tile, steps in by_tile.items()})
        trace = tiled.to_trace(order.grid, meta)
        interpreted = record.n_programs
    how = HowTraced(derivation, reason if derivation is None else "", interpreted, order.iterations is not None,
                    time.perf_counter() - start, len(survey), pick, modelled)
    trace.meta["how"] = how.describe()
    sizes = ", ".join(f"{t.name} {grid_text(t.shape) if t.shape else 'scalar'} {t.dtype}".strip()
                      for t in survey[pick].tensors)
    return UserTrace(trace, order, tuple(grid), survey[pick].n_programs, how, sizes, queries, launcher.model.name)


class _Fallback(Exception):
    def __init__(self, reason: str, estimate: int = 0, seconds_per_program: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.estimate = estimate
        self.seconds_per_program = seconds_per_program  # the sampled programs' interpreted pace


def _derived(launcher: Launcher, name: str, pick: int, grid: tuple[int, int, int], order: OwnOrder,
             real_tensors: frozenset[str], meta: dict[str, str]) -> tuple[Derivation, int]:
    """The derived trace and the number of programs interpreted for it; _Fallback with the reason otherwise."""
    n_tiles = int(order.perm.size)
    if order.iterations is None:
        program_of_tile = np.empty(n_tiles, dtype=np.int64)
        program_of_tile[order.perm] = np.arange(n_tiles, dtype=np.int64)
        tiles_of_program = None
    else:
        tiles_of_program = [order.perm[i] for i in order.iterations]
        program_of_tile = np.full(n_tiles, -1, dtype=np.int64)
        for program, tiles in enumerate(tiles_of_program):
            program_of_tile[tiles] = program
    programs = plan_programs(order.grid, program_of_tile, tiles_of_program, seed=launcher.seed)
    chosen = frozenset(programs)
    started = time.perf_counter()
    recorder, launches, _ = _run(launcher, name, lambda before: chosen if before == pick else (), real_tensors,
                                 describe=True)
    pace = (time.perf_counter() - started) / max(len(programs), 1)  # the wrapper's own work counted too: an upper bound
    record = _same_launch(launches, pick, grid, f"{launcher.wrapper.__name__}(...)")
    samples: dict[int, TileOps] = {}
    try:
        for tile, steps in _tiles_of(record, order, programs).items():
            samples[tile] = tile_ops(steps)
        if record.address_tables:
            raise NotDerivable(f"the kernel loads addresses from {', '.join(record.address_tables)} (tables of "
                               "pointers): where it reads depends on that data")
        infos = record.tensor_infos()
        derivation = derive_trace(samples, order.grid, infos, recorder.pattern_list, record.trace_meta(meta),
                                  tuple(sorted(recorder.integer_atomics)))
    except NotDerivable as err:
        raise _Fallback(str(err), estimate_accesses(samples, recorder.pattern_list, n_tiles), pace) from None
    return derivation, len(programs)


def _modelled(launcher: Launcher, name: str, pick: int, grid: tuple[int, int, int], order: OwnOrder,
              real_tensors: frozenset[str], task_model: TaskModel, meta: dict[str, str]) -> tuple[AccessTrace, int]:
    """The task model's trace for the kernel and the number of programs interpreted to check it; ModelMismatch
    naming the first difference when a sampled program does not access what the model says its tile does."""
    need = task_model.accesses() * BYTES_PER_ACCESS if task_model.accesses is not None else 0
    if need > available_memory_bytes() // 2:
        raise ModelMismatch(f"was not built: its trace would take about {fmt_bytes(need)}, more than half of this "
                            f"machine's {fmt_bytes(available_memory_bytes())} available")
    try:
        model = task_model.build()
    except (UserError, TypeError, ValueError, KeyError) as err:  # a model that cannot be built at this case
        raise ModelMismatch(f"was not built: it fails at this case ({type(err).__name__}: {err})") from None
    programs = sample_programs(int(np.prod(grid)), launcher.seed)
    chosen = frozenset(programs)
    _, launches, _ = _run(launcher, name, lambda before: chosen if before == pick else (), real_tensors)
    record = _same_launch(launches, pick, grid, f"{launcher.wrapper.__name__}(...)")
    tiles = _tiles_of(record, order, programs)
    program_of = {int(t): p for p in programs  # each sampled tile's program (persistent ones run several)
                  for t in np.atleast_1d(order.perm[p if order.iterations is None else order.iterations[p]])}
    check_against_model(tiles, program_of, record.tensor_infos(), model, tuple(order.grid))
    model.meta.update({**meta, "source": f"task access model ({task_model.task})"})
    return model, len(programs)


def _refuse_slow(pace: float | None, n_programs: int, limit_s: float | None, reason: str) -> None:
    """Refuse, before interpreting every program, a trace that would take longer than `limit_s`."""
    if pace is None or limit_s is None or pace * n_programs <= limit_s:
        return
    raise UserError(f"the trace cannot be derived ({reason}) and interpreting every one of its {n_programs:,} "
                    f"programs would take about {fmt_seconds(pace * n_programs)} at the sampled programs' "
                    f"{pace * 1e3:.3g} ms each (limit {fmt_seconds(limit_s)}): trace a smaller size")


def _refuse_large(estimate: int, reason: str) -> None:
    """Refuse, before interpreting every program, a trace that will not fit in memory."""
    need = estimate * BYTES_PER_ACCESS
    available = available_memory_bytes()
    if need > available // 2:
        raise UserError(
            f"the trace cannot be derived ({reason}) and interpreting every program would record about "
            f"{estimate:,} line accesses ({fmt_bytes(need)}); this machine has {fmt_bytes(available)} available: "
            "trace a smaller size")
