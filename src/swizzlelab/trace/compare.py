"""Compare two access traces tile by tile and step by step, independent of where their tensors are placed.

Used to check an analytic access model against the interpreter tracer on the task's real kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from swizzlelab.trace.access_trace import AccessTrace


@dataclass(frozen=True)
class TraceDiff:
    """Result of a comparison: `equal`, and for the first difference a one-line description."""

    equal: bool
    message: str
    n_tiles_differing: int = 0


def normalized_accesses(trace: AccessTrace, start: int, stop: int) -> np.ndarray:
    """Accesses start:stop as rows (tensor index by name order, line within tensor, mask, write)."""
    lines = trace.lines[start:stop]
    idx = trace.tensor_index_of_lines(lines)
    bases = np.array([t.base_line for t in trace.tensors], dtype=np.int64)
    names = sorted(t.name for t in trace.tensors)
    rank = np.array([names.index(t.name) for t in trace.tensors], dtype=np.int64)
    return np.stack(
        [rank[idx], lines - bases[idx], trace.sector_mask[start:stop].astype(np.int64), trace.is_write[start:stop]],
        axis=1,
    )


def compare_traces(model: AccessTrace, traced: AccessTrace, max_reports: int = 1) -> TraceDiff:
    """Exact comparison: same grid, tensor names, steps per tile, and per step the same ordered accesses."""
    if tuple(model.grid) != tuple(traced.grid):
        return TraceDiff(False, f"grids differ: model {model.grid}, traced {traced.grid}", -1)
    model_names = sorted(t.name for t in model.tensors)
    traced_names = sorted(t.name for t in traced.tensors)
    if model_names != traced_names:
        return TraceDiff(False, f"tensors differ: model {model_names}, traced {traced_names}", -1)
    messages: list[str] = []
    differing = 0
    for tile in range(model.n_tiles):
        problem = _tile_difference(model, traced, tile)
        if problem:
            differing += 1
            if len(messages) < max_reports:
                messages.append(f"tile {tile}: {problem}")
    if differing:
        return TraceDiff(False, f"{differing} of {model.n_tiles} tiles differ; first: " + "; ".join(messages), differing)
    return TraceDiff(True, f"all {model.n_tiles} tiles equal ({model.n_accesses} accesses)")


def compare_footprints(model: AccessTrace, traced: AccessTrace) -> TraceDiff:
    """Looser comparison: per tile the same distinct (tensor, line, read/write) with the same OR-ed sectors.

    For models that merge or reorder a tile's accesses (e.g. loads that re-read lines L1 holds).
    """
    if tuple(model.grid) != tuple(traced.grid):
        return TraceDiff(False, f"grids differ: model {model.grid}, traced {traced.grid}", -1)
    differing, first = 0, ""
    for tile in range(model.n_tiles):
        a = _footprint(model, *model.tile_access_range(tile))
        b = _footprint(traced, *traced.tile_access_range(tile))
        if a.shape != b.shape or not np.array_equal(a, b):
            differing += 1
            first = first or f"tile {tile}: model touches {a.shape[0]} distinct lines, traced {b.shape[0]}"
    if differing:
        return TraceDiff(False, f"{differing} of {model.n_tiles} tiles differ in footprint; first: {first}", differing)
    return TraceDiff(True, f"all {model.n_tiles} tile footprints equal")


def _footprint(trace: AccessTrace, start: int, stop: int) -> np.ndarray:
    rows = normalized_accesses(trace, start, stop)
    if rows.shape[0] == 0:
        return rows
    keys = rows[:, [0, 1, 3]]
    order = np.lexsort(keys.T[::-1])
    keys, masks = keys[order], rows[order, 2]
    first = np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)]
    starts = np.flatnonzero(first)
    return np.column_stack([keys[starts], np.bitwise_or.reduceat(masks, starts)])


def _tile_difference(model: AccessTrace, traced: AccessTrace, tile: int) -> str:
    m_steps = range(int(model.tile_step_ptr[tile]), int(model.tile_step_ptr[tile + 1]))
    t_steps = range(int(traced.tile_step_ptr[tile]), int(traced.tile_step_ptr[tile + 1]))
    if len(m_steps) != len(t_steps):
        return f"model has {len(m_steps)} steps, traced {len(t_steps)}"
    for k, (ms, ts) in enumerate(zip(m_steps, t_steps)):
        a = normalized_accesses(model, int(model.step_ptr[ms]), int(model.step_ptr[ms + 1]))
        b = normalized_accesses(traced, int(traced.step_ptr[ts]), int(traced.step_ptr[ts + 1]))
        if a.shape != b.shape:
            return f"step {k}: model has {a.shape[0]} accesses, traced {b.shape[0]}"
        if not np.array_equal(a, b):
            row = int(np.argmax(np.any(a != b, axis=1)))
            return f"step {k} access {row}: model {_describe(model, a[row])}, traced {_describe(traced, b[row])}"
    return ""


def _describe(trace: AccessTrace, row: np.ndarray) -> str:
    name = sorted(t.name for t in trace.tensors)[int(row[0])]
    return f"{'write' if row[3] else 'read'} {name} line {int(row[1])} sectors {int(row[2]):#06b}"
