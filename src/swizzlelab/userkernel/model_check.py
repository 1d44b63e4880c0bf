"""A kernel whose trace cannot be derived (data-dependent loads) checked against its task's analytic access model:
a sample of its programs interpreted and compared, tensor by tensor, with the model's tiles; when all agree the
model's trace stands for the kernel's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from swizzlelab.fmt import grid_text
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo

MODEL_SAMPLES = 32  # programs interpreted to check the model: spread over the grid, a quarter at random
LINES_SHOWN = 2  # differing lines named in a mismatch


@dataclass(frozen=True)
class TaskModel:
    """The task's access model at the traced case: `build()` makes its AccessTrace (on the task's tile grid, tiles
    in row-major order)."""

    task: str
    build: Callable[[], AccessTrace]
    accesses: Callable[[], int] | None = None  # the model's line accesses from the sizes alone, when it says


class ModelMismatch(Exception):
    """The task's model does not stand for the kernel: one line, "does not match it: <first difference>" (or "was
    not built: <why>"), read after "the TASK task's access model"."""


def task_model_of(task: Any, sizes: dict[str, Any], seed: int, arguments: dict[str, Any]) -> TaskModel | None:
    """The task's model at this case, or None when the task has none. Inputs the model takes by name (spmv's
    row_ptr and col_idx) are handed over from the kernel's own arguments instead of being generated again."""
    if task is None or not getattr(task, "has_access_model", False):
        return None
    accepted = inspect.signature(task.access.access_model).parameters
    given = {k: v for k, v in arguments.items() if k in accepted and k not in sizes and k != "config"}
    count = getattr(task.access, "line_accesses", None)
    return TaskModel(str(task.name), lambda: task.access_model({"seed": seed, **sizes}, **given),
                     (lambda: int(count(**sizes))) if callable(count) else None)


def sample_programs(n_programs: int, seed: int, count: int = MODEL_SAMPLES) -> list[int]:
    """`count` launch indices: evenly spread from the first program to the last, plus a quarter drawn at random
    (seeded), so both ends of the grid and its middle are checked."""
    if n_programs <= count:
        return list(range(n_programs))
    spread = np.linspace(0, n_programs - 1, num=count - count // 4).round().astype(np.int64)
    drawn = np.random.default_rng(seed).choice(n_programs, size=count // 4, replace=False)
    return sorted({int(p) for p in np.concatenate([spread, drawn])})


# What one tile touches in one tensor: tensor-relative keys (line * 2 + is_write), ascending, and each key's sector
# mask (the OR over every access to it).
Touch = tuple[np.ndarray, np.ndarray]


def _touches(lines: np.ndarray, masks: np.ndarray, writes: np.ndarray, tensors: list[TensorInfo]) -> list[Touch]:
    out = []
    for tensor in tensors:
        inside = (lines >= tensor.base_line) & (lines < tensor.end_line)
        keys = (lines[inside] - tensor.base_line) * 2 + writes[inside].astype(np.int64)
        order = np.argsort(keys, kind="stable")
        keys, held = keys[order], masks[inside][order]
        unique, first = np.unique(keys, return_index=True)
        merged = np.bitwise_or.reduceat(held, first) if unique.size else np.zeros(0, np.uint8)
        out.append((unique, merged.astype(np.uint8)))
    return out


def _same(a: Touch, b: Touch) -> bool:
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _difference(mine: Touch, theirs: Touch) -> str:
    """The first lines where two touches differ, as 'line L read (sectors 0x..)' phrases."""
    def phrase(pairs: list[tuple[int, int]]) -> str:
        shown = [f"line {k >> 1} {'written' if k & 1 else 'read'} (sectors 0x{m:x})" for k, m in pairs[:LINES_SHOWN]]
        more = f" and {len(pairs) - LINES_SHOWN} more" if len(pairs) > LINES_SHOWN else ""
        return ", ".join(shown) + more if shown else "nothing"

    pairs_mine = set(zip(mine[0].tolist(), mine[1].tolist()))
    pairs_theirs = set(zip(theirs[0].tolist(), theirs[1].tolist()))
    return (f"the kernel touches {phrase(sorted(pairs_mine - pairs_theirs))}, the model "
            f"{phrase(sorted(pairs_theirs - pairs_mine))} instead ({mine[0].size} vs {theirs[0].size} lines in all)")


def check_against_model(tiles: dict[int, Iterable[Any]], programs: dict[int, int], tensors: list[TensorInfo],
                        model: AccessTrace, grid: tuple[int, ...]) -> None:
    """ModelMismatch naming the first difference unless every sampled tile (tile -> its recorded steps, each a list
    of ops with lines/masks/is_write; `programs` gives each tile's launch index) touches, in every tensor argument,
    exactly the lines and sectors the model's tile touches in a tensor of the same size. Tensors are paired by
    size and element bytes, a same-named one first; what the pairing leaves unread must be unread in the samples."""
    if tuple(model.grid) != tuple(grid):
        raise ModelMismatch(f"does not match it: the task model's tile grid {grid_text(model.grid)} is not the "
                            f"kernel's {grid_text(grid)}")
    sampled = sorted(tiles)
    mine: dict[int, list[Touch]] = {}
    theirs: dict[int, list[Touch]] = {}
    for tile in sampled:
        ops = [op for step in tiles[tile] for op in step if op.lines.size]
        lines = np.concatenate([op.lines for op in ops]) if ops else np.zeros(0, np.int64)
        masks = np.concatenate([op.masks for op in ops]) if ops else np.zeros(0, np.uint8)
        writes = np.concatenate([np.full(op.lines.size, op.is_write) for op in ops]) if ops else np.zeros(0, bool)
        mine[tile] = _touches(lines, masks, writes, tensors)
        start, stop = model.tile_access_range(tile)
        theirs[tile] = _touches(model.lines[start:stop], model.sector_mask[start:stop], model.is_write[start:stop],
                                model.tensors)
    where = lambda tile: f"program {programs[tile]} (tile {tile} of {grid_text(grid)})"  # noqa: E731
    taken: set[int] = set()
    for u, tensor in enumerate(tensors):
        touched = [t for t in sampled if mine[t][u][0].size]
        fits = [m for m, info in enumerate(model.tensors) if m not in taken and info.n_lines == tensor.n_lines
                and info.elem_bytes == tensor.elem_bytes]
        fits.sort(key=lambda m: model.tensors[m].name != tensor.name)
        match = next((m for m in fits if all(_same(mine[t][u], theirs[t][m]) for t in sampled)), None)
        if match is not None:
            taken.add(match)
            continue
        if not touched:
            continue  # an argument the sampled programs never touch needs no counterpart
        if not fits:
            raise ModelMismatch(f"does not match it: {where(touched[0])}: the kernel touches {tensor.name}, and the "
                                f"task model has no tensor of its size ({tensor.n_lines} lines of "
                                f"{tensor.elem_bytes}-byte elements)")
        best = fits[0]
        tile = next(t for t in sampled if not _same(mine[t][u], theirs[t][best]))
        raise ModelMismatch(f"does not match it: {where(tile)}: {tensor.name} differs from the task model's "
                            f"{model.tensors[best].name}: {_difference(mine[tile][u], theirs[tile][best])}")
    for m, info in enumerate(model.tensors):
        used = next((t for t in sampled if theirs[t][m][0].size), None)
        if m not in taken and used is not None:
            raise ModelMismatch(f"does not match it: {where(used)}: the task model touches {info.name}, which no "
                                "tensor argument of the kernel matches")
