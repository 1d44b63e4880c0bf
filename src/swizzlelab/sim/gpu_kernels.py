"""CUDA kernels of the GPU simulator backend (numba.cuda): the stream's records, and one thread per set index.

Imported only by sim.gpu when the GPU engine runs (numba.cuda's start-up is not paid by CPU-only commands).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from swizzlelab.sim.walk import flush_sets, walk_records

walk_dev = cuda.jit(device=True)(walk_records)
flush_dev = cuda.jit(device=True)(flush_sets)


@cuda.jit
def expand(step_ptr, steps, near, starts, lines, masks, writes, set_home, pbits, n_simulated, rec, shw, key):
    """One thread per step: its accesses become records at the step's place in the domain's stream, each keyed
    by its set index (n_simulated for sets outside the sample)."""
    k = cuda.grid(1)
    if k < steps.shape[0]:
        step = steps[k]
        p = starts[k]
        nbits = np.int64(near[k]) << 5
        for a in range(step_ptr[step], step_ptr[step + 1]):
            s = np.int64(set_home[a])
            st = s >> pbits
            rec[p] = (lines[a] << 8) | nbits | (np.int64(writes[a]) << 4) | np.int64(masks[a])
            shw[p] = s
            key[p] = st if st < n_simulated else n_simulated
            p += 1


@cuda.jit
def walk_sets(rec, shw, seg, pbits, n_partitions, ways, sets, stats, got, pair):
    """One thread per set index st: records seg[st]..seg[st+1]-1 (its accesses in stream order) through its sets
    in every partition, then the write-back of what they still hold dirty."""
    st = cuda.grid(1)
    if st < seg.shape[0] - 1:
        walk_dev(rec, shw, seg[st], seg[st + 1], pbits, n_partitions, ways, sets, stats, st, got, pair)
        flush_dev(sets, st, st + 1, n_partitions, ways, stats, st)
