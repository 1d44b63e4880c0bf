"""Loop-direction transforms of an access trace: some tiles walk their loop steps backwards (writes stay last).
Models a kernel whose programs of odd waves walk K backwards (tests/kdir_probe.py), for the simulator.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import njit

from swizzlelab.errors import UserError
from swizzlelab.trace.access_trace import AccessTrace


def reverse_steps(trace: AccessTrace, tiles: np.ndarray) -> AccessTrace:
    """The trace with each tile of `tiles` running its steps in reverse order; its writes move to its (new) last
    step, after that step's reads, as a kernel that reverses its K loop still stores its output at the end."""
    n_tiles = trace.n_tiles
    tiles = np.asarray(tiles, dtype=np.int64)
    if tiles.size and (tiles.min() < 0 or tiles.max() >= n_tiles):
        raise UserError(f"reverse_steps: tile indices must lie in 0..{n_tiles - 1}")
    flip = np.zeros(n_tiles, dtype=np.bool_)
    flip[tiles] = True
    if not flip.any():
        return trace
    lines = np.empty_like(trace.lines)
    masks = np.empty_like(trace.sector_mask)
    writes = np.empty_like(trace.is_write)
    step_ptr = np.empty(trace.n_steps + 1, dtype=np.int64)
    _reorder(np.ascontiguousarray(trace.lines), np.ascontiguousarray(trace.sector_mask),
             np.ascontiguousarray(trace.is_write), np.ascontiguousarray(trace.step_ptr, dtype=np.int64),
             np.ascontiguousarray(trace.tile_step_ptr, dtype=np.int64), flip, lines, masks, writes, step_ptr)
    meta = {**trace.meta, "step_direction": f"reversed in {int(flip.sum())} of {n_tiles} tiles"}
    return replace(trace, lines=lines, sector_mask=masks, is_write=writes, step_ptr=step_ptr, meta=meta)


@njit(cache=True, nogil=True)
def _reorder(lines, masks, writes, step_ptr, tile_step_ptr, flip, out_lines, out_masks, out_writes, out_step_ptr):
    # One sequential pass: a flipped tile's steps are copied last to first without their writes, and all its
    # writes follow the reads of its new last step.
    k = 0
    j = 0
    out_step_ptr[0] = 0
    for t in range(tile_step_ptr.size - 1):
        s0, s1 = tile_step_ptr[t], tile_step_ptr[t + 1]
        for i in range(s1 - s0):
            s = s0 + i if not flip[t] else s1 - 1 - i
            for a in range(step_ptr[s], step_ptr[s + 1]):
                if flip[t] and writes[a]:
                    continue
                out_lines[k] = lines[a]
                out_masks[k] = masks[a]
                out_writes[k] = writes[a]
                k += 1
            if flip[t] and i == s1 - s0 - 1:
                for a in range(step_ptr[s0], step_ptr[s1]):
                    if writes[a]:
                        out_lines[k] = lines[a]
                        out_masks[k] = masks[a]
                        out_writes[k] = True
                        k += 1
            j += 1
            out_step_ptr[j] = k


def alternate_by_wave(trace: AccessTrace, perm: np.ndarray, wave: int) -> AccessTrace:
    """Programs of odd waves (launch index // wave odd) walk their steps backwards: `perm[i]` is the tile
    launched i-th, as for `simulate`. wave = 0 leaves the trace as it is."""
    if wave < 0:
        raise UserError(f"wave must be >= 0 programs, got {wave}")
    if wave == 0:
        return trace
    perm = np.asarray(getattr(perm, "perm", perm), dtype=np.int64)
    if perm.size != trace.n_tiles:
        raise UserError(f"launch order has {perm.size} entries but the trace has {trace.n_tiles} tiles")
    odd = (np.arange(perm.size, dtype=np.int64) // wave) % 2 == 1
    return reverse_steps(trace, perm[odd])
