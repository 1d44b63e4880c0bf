"""CUDA kernels of the GPU simulator backend (numba.cuda): the stream's records, and one thread per set index.

Imported only by sim.gpu when the GPU engine runs (numba.cuda's start-up is not paid by CPU-only commands).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from swizzlelab.sim.walk import EMPTY, flush_sets, walk_records

walk_dev = cuda.jit(device=True)(walk_records)
flush_dev = cuda.jit(device=True)(flush_sets)


# Threads per step in `expand_lanes`: a warp, so that consecutive lanes read and write consecutive records (one
# thread per step, as `expand` runs, makes every lane's load and store its own memory sector).
EXPAND_LANES = 32


# size: a CUDA device function takes its arrays and scalars as separate arguments (numba.cuda types each).
@cuda.jit(device=True)
def _put_record(a, p, k, nbits, lines, masks, writes, set_home, pbits, n_simulated, shw_mask, rec, shw, key, k_time,
                k_tile, ctime, ctile):
    s = np.int64(set_home[a])
    st = s >> pbits
    rec[p] = (lines[a] << 8) | nbits | (np.int64(writes[a]) << 4) | np.int64(masks[a])
    shw[p] = s & shw_mask
    key[p] = st if st < n_simulated else n_simulated
    if ctime.shape[0] > 0:
        ctime[p] = k_time[k]
        ctile[p] = k_tile[k]


# size: a CUDA kernel takes its arrays and scalars as separate arguments (numba.cuda types each).
@cuda.jit
def expand(step_ptr, steps, near, starts, lines, masks, writes, set_home, pbits, n_simulated, shw_mask, rec, shw, key,
           k_time, k_tile, ctime, ctile):
    """One thread per step: its accesses become records at the step's place in the domain's stream, each keyed
    by its set index (n_simulated for sets outside the sample); set words keep the bits of `shw_mask`. Non-empty
    `ctime`, `ctile` get each record's step start time and program (k_time, k_tile of its place in the schedule),
    for the coalescer: carried with the record, they cost the sort a few bytes instead of the coalescer two
    dependent loads a record."""
    k = cuda.grid(1)
    if k < steps.shape[0]:
        step = steps[k]
        p = starts[k]
        nbits = np.int64(near[k]) << 5
        for a in range(step_ptr[step], step_ptr[step + 1]):
            _put_record(a, p, k, nbits, lines, masks, writes, set_home, pbits, n_simulated, shw_mask, rec, shw, key,
                        k_time, k_tile, ctime, ctile)
            p += 1


# size: a CUDA kernel takes its arrays and scalars as separate arguments (numba.cuda types each).
@cuda.jit
def expand_lanes(step_ptr, steps, near, starts, lines, masks, writes, set_home, pbits, n_simulated, shw_mask, rec,
                 shw, key, k_time, k_tile, ctime, ctile):
    """`expand`'s records with EXPAND_LANES threads per step (grid: steps x EXPAND_LANES), lane i taking the step's
    accesses i, i + EXPAND_LANES, ...: the same records at the same places."""
    t = cuda.grid(1)
    k = t // EXPAND_LANES
    if k < steps.shape[0]:
        step = steps[k]
        a0 = step_ptr[step]
        shift = starts[k] - a0
        nbits = np.int64(near[k]) << 5
        for a in range(a0 + t % EXPAND_LANES, step_ptr[step + 1], EXPAND_LANES):
            _put_record(a, shift + a, k, nbits, lines, masks, writes, set_home, pbits, n_simulated, shw_mask, rec,
                        shw, key, k_time, k_tile, ctime, ctile)


@cuda.jit
def count_keys(key, counts):
    """counts[v] += how many keys equal v (counts zeroed by the caller)."""
    i = cuda.grid(1)
    if i < key.shape[0]:
        cuda.atomic.add(counts, key[i], 1)


@cuda.jit
def gather_records(order, rec, shw, ctime, ctile, rec_out, shw_out, ctime_out, ctile_out):
    """rec_out[i], shw_out[i] (and the coalescer's ctime, ctile when non-empty) = rec[order[i]], shw[order[i]], ...:
    the sorted copies from one read of the order."""
    i = cuda.grid(1)
    if i < order.shape[0]:
        j = order[i]
        rec_out[i] = rec[j]
        shw_out[i] = shw[j]
        if ctime.shape[0] > 0:
            ctime_out[i] = ctime[j]
            ctile_out[i] = ctile[j]


# Entries of a coalesce_sets thread's table: whole-line reads of its set index still within the window. A set index
# sees about 0.1 whole reads per window on matmul 8192 in steady state (132 SMs x 2 programs x 256 lines a step x 0.1
# step times over 12,800 set indices), but every program's first step starts at time 0: about 5 a set on average
# then. A thread scans only the live entries, so 64 costs local memory, not time; a thread that runs out says so
# and the CPU counts instead.
COALESCE_SLOTS = 64


def _make_coalesce_sets(SLOTS: int):
    """coalesce_sets with a table of SLOTS entries per thread (local memory)."""

    @cuda.jit
    def coalesce_sets(rec, ctime, ctile, seg, window, full_mask, counts, overflow):
        """One thread per set index st: kernels.coalesce_reads over records seg[st]..seg[st+1]-1 (its accesses in
        stream order; record r's step started at ctime[r], which never decreases along the stream, and belongs to
        program ctile[r]). counts[st] = whole-line reads coalesced (times the sectors of a line: the caller
        multiplies); overflow[0] = 1 if a table ran out of entries (the count is then not exact)."""
        st = cuda.grid(1)
        if st < seg.shape[0] - 1:
            # A ring of the latest whole reads, oldest first: key (line << 3 | near side), start time, program.
            # Start times never decrease along the stream, so what left the window is at the ring's head; a read
            # that replaces its line's entry leaves a dead entry (key -1) behind and is appended.
            keys = cuda.local.array(SLOTS, np.int64)
            times = cuda.local.array(SLOTS, np.float64)
            tiles = cuda.local.array(SLOTS, np.int64)
            head = 0
            size = 0
            n = 0
            for r in range(seg[st], seg[st + 1]):
                # All three loads before the test: independent, they wait on memory once, not in turn.
                x = rec[r]
                t = ctime[r]
                tile = ctile[r]
                if ((x >> 4) & 1) != 0 or (x & 15) != full_mask:
                    continue
                key = x >> 5
                while size > 0 and (keys[head] == -1 or t - times[head] > window):
                    head = (head + 1) % SLOTS
                    size -= 1
                found = -1
                for i in range(size):
                    j = (head + i) % SLOTS
                    if keys[j] == key:
                        found = j
                        break
                if found >= 0:
                    if tiles[found] != tile and t - times[found] <= window:
                        n += 1
                        continue
                    keys[found] = -1
                if size == SLOTS:
                    overflow[0] = 1
                    break
                j = (head + size) % SLOTS
                keys[j] = key
                times[j] = t
                tiles[j] = tile
                size += 1
            counts[st] = n

    return coalesce_sets


_COALESCE: dict[int, object] = {}


def coalesce_sets_for():
    """coalesce_sets with COALESCE_SLOTS entries per thread (read at the call: a test sets 1 to fill the tables),
    compiled on first use."""
    slots = COALESCE_SLOTS
    if slots not in _COALESCE:
        _COALESCE[slots] = _make_coalesce_sets(slots)
    return _COALESCE[slots]


# Threads per block of the walk (sim.gpu launches it so): the shared-memory variant sizes its array by it.
WALK_THREADS = 64


def _make_walk_sets(WAYS: int, PARTITIONS: int, PBITS: int, LOCAL: bool, SHARED: bool = False):
    """walk_sets compiled with the set geometry as constants when WAYS > 0 (as sim.kernels does for the CPU), else
    taking it from its arguments. LOCAL (with WAYS > 0): each thread keeps its set index's sets (every partition,
    WAYS * PARTITIONS words) in its own local memory, which the GPU caches write-back in L1, instead of the shared
    array in global memory (whose stores go through to L2); its records' set words must then hold the home
    partition alone (expand's shw_mask), so the walk addresses set 0 of that array. SHARED (with LOCAL): the same
    words in shared memory, word i of the block's threads side by side (lanes touching the same way hit distinct
    banks), for the latency of shared memory rather than L1's."""
    words = max(WAYS * PARTITIONS, 1)

    @cuda.jit
    def walk_sets(rec, shw, seg, pbits, n_partitions, ways, sets, stats, got, pair):
        """One thread per set index st: records seg[st]..seg[st+1]-1 (its accesses in stream order) through its sets
        in every partition, then the write-back of what they still hold dirty."""
        st = cuda.grid(1)
        if st < seg.shape[0] - 1:
            if LOCAL and SHARED:
                block = cuda.shared.array((words, WALK_THREADS), np.int64)
                own = block[:, cuda.threadIdx.x]
                for i in range(words):
                    own[i] = EMPTY
                walk_dev(rec, shw, seg[st], seg[st + 1], PBITS, PARTITIONS, WAYS, own, stats, st, got, pair)
                flush_dev(own, 0, 1, PARTITIONS, WAYS, stats, st)
            elif LOCAL:
                own = cuda.local.array(words, np.int64)
                for i in range(words):
                    own[i] = EMPTY
                walk_dev(rec, shw, seg[st], seg[st + 1], PBITS, PARTITIONS, WAYS, own, stats, st, got, pair)
                flush_dev(own, 0, 1, PARTITIONS, WAYS, stats, st)
            elif WAYS > 0:
                walk_dev(rec, shw, seg[st], seg[st + 1], PBITS, PARTITIONS, WAYS, sets, stats, st, got, pair)
                flush_dev(sets, st, st + 1, PARTITIONS, WAYS, stats, st)
            else:
                walk_dev(rec, shw, seg[st], seg[st + 1], pbits, n_partitions, ways, sets, stats, st, got, pair)
                flush_dev(sets, st, st + 1, n_partitions, ways, stats, st)

    return walk_sets


walk_sets = _make_walk_sets(0, 0, 0, False)
_VARIANTS: dict[tuple[int, int, int, bool, bool], object] = {}
_GEOMETRIES = ((16, 2, 1), (16, 1, 0))  # the models' L2 sets: 16 ways; 2 partitions on NVIDIA, 1 on AMD


def walk_sets_for(ways: int, n_partitions: int, pbits: int, local: bool, shared: bool = False):
    """(kernel, whether it keeps sets per thread) for this set geometry: a compiled-in variant for the models'
    geometries (compiled on first use; per-thread sets in local or, with `shared`, shared memory), else the
    generic kernel on global memory."""
    geometry = (int(ways), int(n_partitions), int(pbits))
    if geometry not in _GEOMETRIES:
        return walk_sets, False
    key = (*geometry, bool(local), bool(local) and bool(shared))
    if key not in _VARIANTS:
        _VARIANTS[key] = _make_walk_sets(*key)
    return _VARIANTS[key], bool(local)
