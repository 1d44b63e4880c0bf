"""The set-partitioned engine (numba): a domain's sets walked in independent groups on a fixed schedule
(`run_share` over the stream, `run_groups` over the cached group CSR), and what the time model reads of its misses.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from swizzlelab.sim.walk import flush_sets, walk_records


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the host CPU to bring array[index] into its caches (a hint: never faults, even out of bounds)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        i32 = ir.IntType(32)
        # read, keep in every cache level, data cache
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), i8p), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


# ---- Set-partitioned simulator -------------------------------------------------------------------------------
# The order in which programs' steps run does not depend on what the cache holds, so it is computed once per
# domain (`schedule_domain`); then, with a set-associative L2 whose set index is a hash of the line alone, the
# sets of one index across all partitions form a group that no access outside it touches (a far lookup goes to
# the same set index at the home partition). Groups are independent LRU caches, so any split of the sets gives
# the sums of one serial run. `run_share` walks a domain's access stream once for one range of sets, packs the
# accesses of that range into records (sim.walk) and queues them per sub-range small enough for the host CPU's
# L2; a full queue is run through its sets (`walk_records`) at once, so the sets stay in cache while it runs.
# Within a domain, steps run in order of start time, so a domain's DRAM-bound reads in stream order are in time
# order too (the memory-side cache behind the L2s merges the domains by time).

_walk = njit(cache=True, nogil=True, inline="always")(walk_records)
_flush = njit(cache=True, nogil=True)(flush_sets)


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@njit(cache=True, nogil=True)
def run_share(
    lines: np.ndarray,
    sector_mask: np.ndarray,
    is_write: np.ndarray,
    set_home: np.ndarray,
    pbits: np.int64,
    step_ptr: np.ndarray,
    sched_step: np.ndarray,
    sched_near: np.ndarray,
    n_partitions: np.int64,
    ways: np.int64,
    set_lo: np.int64,
    set_hi: np.int64,
    n_sub: np.int64,
    queue_len: np.int64,
    headroom: np.int64,
    sets: np.ndarray,
    stats: np.ndarray,
    row: np.int64,
    got_stream: np.ndarray,
    pair: np.int64 = 0,
) -> None:
    """Simulate sets set_lo..set_hi-1 (every partition) of one domain whose steps run in the order `sched_step`
    (near partitions `sched_near`); counts go to stats[row]. Same model and counts as `run_domain` with the same
    set count (sim.walk.walk_records).

    `set_home[a]` = set index << pbits | home partition of access a (`set_index_of`). `sets` (layout of
    walk_records) must start EMPTY for these sets. The range is split into `n_sub` sub-ranges, each with a queue
    of `queue_len` records; a queue with less than `headroom` (the longest step) free runs after the step. When
    `got_stream` is non-empty (one byte per access of the domain's stream, in stream order), the sectors each
    access of these sets read from DRAM are written there.
    """
    span = set_hi - set_lo
    sub_of = np.empty(max(span, 1), dtype=np.int64)
    for i in range(span):
        sub_of[i] = (i * n_sub) // span
    queue_rec = np.empty(n_sub * queue_len, dtype=np.int64)
    queue_set = np.empty(n_sub * queue_len, dtype=np.int32)
    fill = np.zeros(n_sub, dtype=np.int64)
    # Queues that came within `headroom` of full during the current step: they run before the next one.
    pending = np.empty(n_sub, dtype=np.int64)
    n_pending = 0
    record = got_stream.shape[0] > 0
    n_rec = n_sub * queue_len if record else 0
    queue_pos = np.empty(n_rec, dtype=np.int64)
    got = np.zeros(n_rec, dtype=np.uint8)
    pos = 0
    n_steps = sched_step.shape[0]
    for k in range(n_steps + 1):
        # k == n_steps: drain every queue that is not empty.
        flush_all = k == n_steps
        if not flush_all:
            step = sched_step[k]
            nbits = np.int64(sched_near[k]) << 5
            a0 = step_ptr[step]
            a1 = step_ptr[step + 1]
            for a in range(a0, a1):
                s = np.int64(set_home[a])
                st = (s >> pbits) - set_lo
                if st < 0 or st >= span:
                    continue
                g = sub_of[st]
                q = g * queue_len + fill[g]
                queue_rec[q] = (lines[a] << 8) | nbits | (np.int64(is_write[a]) << 4) | np.int64(sector_mask[a])
                queue_set[q] = s
                if record:
                    queue_pos[q] = pos + a - a0
                fill[g] += 1
                if fill[g] == queue_len - headroom + 1:
                    pending[n_pending] = g
                    n_pending += 1
            pos += a1 - a0
        else:
            n_pending = 0
            for g in range(n_sub):
                if fill[g] > 0:
                    pending[n_pending] = g
                    n_pending += 1
        for i in range(n_pending):
            g = pending[i]
            f = fill[g]
            lo = g * queue_len
            _walk(queue_rec, queue_set, lo, lo + f, pbits, n_partitions, ways, sets, stats, row, got, pair)
            if record:
                for r in range(lo, lo + f):
                    got_stream[queue_pos[r]] = got[r]
            fill[g] = 0
        n_pending = 0
    _flush(sets, set_lo, set_hi, n_partitions, ways, stats, row)


@njit(cache=True, nogil=True)
def stream_misses(lines: np.ndarray, step_ptr: np.ndarray, sched_step: np.ndarray, sched_time: np.ndarray,
                  got_stream: np.ndarray, n_miss: np.int64):
    """The DRAM-bound reads of one domain in stream order: (line, sector mask, start time of its step)."""
    out_line = np.empty(n_miss, dtype=np.int64)
    out_mask = np.empty(n_miss, dtype=np.uint8)
    out_time = np.empty(n_miss, dtype=np.float64)
    n = 0
    pos = 0
    for k in range(sched_step.shape[0]):
        step = sched_step[k]
        a0 = step_ptr[step]
        for a in range(a0, step_ptr[step + 1]):
            g = got_stream[pos]
            pos += 1
            if g != 0:
                out_line[n] = lines[a]
                out_mask[n] = g
                out_time[n] = sched_time[k]
                n += 1
    return out_line, out_mask, out_time


@njit(cache=True, nogil=True)
def step_miss_counts(step_ptr: np.ndarray, sched_step: np.ndarray, got_stream: np.ndarray,
                     step_miss: np.ndarray) -> None:
    """step_miss[step] = how many accesses of each scheduled step read from DRAM (got_stream != 0, in stream
    order, as run_groups writes it)."""
    pos = 0
    for k in range(sched_step.shape[0]):
        step = sched_step[k]
        n = 0
        for a in range(step_ptr[step], step_ptr[step + 1]):
            n += got_stream[pos] != 0
            pos += 1
        step_miss[step] = n


@njit(cache=True, nogil=True)
def step_access_counts(step_ptr: np.ndarray, set_home: np.ndarray, pbits: np.int64, n_simulated: np.int64) -> np.ndarray:
    """Accesses of each step of the trace to sets 0..n_simulated-1 (the ones a sampled run simulates)."""
    n_steps = step_ptr.shape[0] - 1
    out = np.zeros(n_steps, dtype=np.int64)
    for s in range(n_steps):
        n = 0
        for a in range(step_ptr[s], step_ptr[s + 1]):
            n += (np.int64(set_home[a]) >> pbits) < n_simulated
        out[s] = n
    return out


@njit(cache=True, nogil=True)
def merge_by_time(times: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The order that sorts runs times[starts[i]:starts[i+1]] (each non-decreasing) into one by time, ties in
    run order: what a stable sort of the concatenation gives, in one pass."""
    n_runs = starts.shape[0] - 1
    head = starts[:-1].copy()
    out = np.empty(starts[-1] - starts[0], dtype=np.int64)
    n = 0
    while n < out.shape[0]:
        best = -1
        for i in range(n_runs):
            if head[i] < starts[i + 1] and (best < 0 or times[head[i]] < times[head[best]]):
                best = i
        # Take from the earliest run up to the next run's head time (its equal times too if it comes first).
        limit = np.inf
        after = False
        for i in range(n_runs):
            if i != best and head[i] < starts[i + 1] and times[head[i]] < limit:
                limit = times[head[i]]
                after = i > best
        h = head[best]
        end = starts[best + 1]
        while h < end and (times[h] < limit or (after and times[h] == limit)):
            out[n] = h
            n += 1
            h += 1
        head[best] = h
    return out


# ---- Accesses partitioned by set group (cached per trace) ----------------------------------------------------
# Which L2 set an access goes to depends only on its line, so the trace can be split once into groups of set
# indices, each keeping its accesses per step in trace order. A simulation then runs each group over the
# domain's schedule on its own: it touches only that group's accesses (no pass over the others) and only that
# group's sets, sized to stay in a host core's L2 cache.


@njit(cache=True, nogil=True)
def group_counts(set_home: np.ndarray, step_ptr: np.ndarray, pbits: np.int64, group_of: np.ndarray,
                 n_groups: np.int64) -> np.ndarray:
    """ptr[s, g]: where step s's accesses of group g start in the group CSR (group g's records lie together, in
    step order; ptr[n_steps, g]: where they end); a group index of -1 (sets outside the sample) drops the access."""
    n_steps = step_ptr.shape[0] - 1
    counts = np.zeros((n_groups, n_steps), dtype=np.int64)
    for s in range(n_steps):
        for a in range(step_ptr[s], step_ptr[s + 1]):
            g = group_of[np.int64(set_home[a]) >> pbits]
            if g >= 0:
                counts[g, s] += 1
    ptr = np.empty((n_steps + 1, n_groups), dtype=np.int64)
    total = 0
    for g in range(n_groups):
        for s in range(n_steps):
            ptr[s, g] = total
            total += counts[g, s]
        ptr[n_steps, g] = total
    return ptr


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@njit(cache=True, nogil=True)
def group_fill(lines: np.ndarray, sector_mask: np.ndarray, is_write: np.ndarray, set_home: np.ndarray,
               step_ptr: np.ndarray, pbits: np.int64, group_of: np.ndarray, ptr: np.ndarray, rec: np.ndarray,
               shw: np.ndarray, offset: np.ndarray) -> None:
    """Fill the group CSR: each access as a record without its near partition (sim.walk), its set word, and its
    place within its step."""
    n_steps = step_ptr.shape[0] - 1
    fill = ptr[:n_steps].copy()
    for s in range(n_steps):
        a0 = step_ptr[s]
        for a in range(a0, step_ptr[s + 1]):
            sw = np.int64(set_home[a])
            g = group_of[sw >> pbits]
            if g >= 0:
                i = fill[s, g]
                rec[i] = (lines[a] << 8) | (np.int64(is_write[a]) << 4) | np.int64(sector_mask[a])
                shw[i] = sw
                offset[i] = a - a0
                fill[s, g] = i + 1


@njit(cache=True, nogil=True)
def gather_spans(ptr: np.ndarray, steps: np.ndarray, first: np.ndarray, last: np.ndarray) -> None:
    """first[g, k], last[g, k] = ptr[steps[k], g], ptr[steps[k] + 1, g]: the group CSR's spans in schedule order."""
    for k in range(steps.shape[0]):
        s = steps[k]
        for g in range(ptr.shape[1]):
            first[g, k] = ptr[s, g]
            last[g, k] = ptr[s + 1, g]


# How many scheduled steps ahead run_groups asks for a group's records (measured on matmul 8192, one core).
PREFETCH_STEPS = 16


def _make_run_groups(WAYS: int, PARTITIONS: int, PBITS: int, RECORD: int):
    """run_groups compiled for one set geometry and recording choice: WAYS > 0 fixes ways, partitions and
    partition bits at compile time (LLVM then addresses sets by shifts and unrolls the way loops: measured 1.25x on
    matmul 8192 with the H100 model, one core), RECORD 0/1 fixes whether DRAM-bound sectors are written
    (-1: as `got_stream` says). The arguments stay those of the generic kernel; the results are the same."""

    # size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
    @njit(cache=True, nogil=True)
    def run_groups(
        first: np.ndarray,
        last: np.ndarray,
        rec: np.ndarray,
        shw: np.ndarray,
        offset: np.ndarray,
        group_sets: np.ndarray,
        g_lo: np.int64,
        g_hi: np.int64,
        sched_step: np.ndarray,
        sched_near: np.ndarray,
        step_start: np.ndarray,
        pbits: np.int64,
        n_partitions: np.int64,
        ways: np.int64,
        queue_len: np.int64,
        sets: np.ndarray,
        stats: np.ndarray,
        row: np.int64,
        got_stream: np.ndarray,
        pair: np.int64 = 0,
    ) -> None:
        """Simulate groups g_lo..g_hi-1 (sets group_sets[g]..group_sets[g+1]-1, every partition) of one domain whose
        steps run in the order `sched_step` (near partitions `sched_near`); counts go to stats[row]. Same model and
        counts as `run_domain` with the same set count (sim.walk.walk_records).

        first[g, k]..last[g, k]-1 are group g's records of the k-th scheduled step (the group CSR's pointers taken in
        schedule order, so each group reads them in one sweep). Each group's accesses go, step by step, through a
        queue of `queue_len` records (at least the longest step) that runs when it cannot take the next step. When `got_stream` is non-empty (one byte per
        access of the domain's stream, `step_start[k]` where the k-th scheduled step starts in it), the sectors each
        access read from DRAM are written there.
        """
        if WAYS > 0:
            pbits = PBITS
            n_partitions = PARTITIONS
            ways = WAYS
        if RECORD < 0:
            record = got_stream.shape[0] > 0
        else:
            record = RECORD == 1
        q_rec = np.empty(queue_len, dtype=np.int64)
        q_set = np.empty(queue_len, dtype=np.int32)
        q_pos = np.empty(queue_len if record else 0, dtype=np.int64)
        got = np.zeros(queue_len if record else 0, dtype=np.uint8)
        n_k = sched_step.shape[0]
        for g in range(g_lo, g_hi):
            n = 0
            for k in range(n_k + 1):
                if k < n_k:
                    if k + PREFETCH_STEPS < n_k:
                        # Steps run in schedule order, not in the CSR's order: each span is a jump the hardware
                        # prefetcher cannot follow, so the spans a few steps ahead are fetched now.
                        p = np.int64(first[g, k + PREFETCH_STEPS])
                        _prefetch(rec, p)
                        _prefetch(rec, p + 8)
                        _prefetch(shw, p)
                        if record:
                            _prefetch(offset, p)
                    lo = np.int64(first[g, k])
                    hi = np.int64(last[g, k])
                    if hi == lo:
                        continue
                else:
                    lo = 0
                    hi = 0
                if n + hi - lo > queue_len or k == n_k:
                    if n > 0:
                        _walk(q_rec, q_set, 0, n, pbits, n_partitions, ways, sets, stats, row, got, pair)
                        if record:
                            for r in range(n):
                                got_stream[q_pos[r]] = got[r]
                    n = 0
                    if k == n_k:
                        break
                nbits = np.int64(sched_near[k]) << 5
                for i in range(lo, hi):
                    q_rec[n] = rec[i] | nbits
                    q_set[n] = shw[i]
                    if record:
                        q_pos[n] = step_start[k] + offset[i]
                    n += 1
            _flush(sets, group_sets[g], group_sets[g + 1], n_partitions, ways, stats, row)

    return run_groups


# The generic kernel and the variants of the models' geometries (16 ways; 2 partitions on NVIDIA, 1 on AMD),
# each compiled on first use.
run_groups = _make_run_groups(0, 0, 0, -1)
_RUN_GROUPS_VARIANTS: dict[tuple[int, int, int, bool], object] = {}
_SPECIALIZED_GEOMETRIES = ((16, 2, 1), (16, 1, 0))


def run_groups_for(ways: int, n_partitions: int, pbits: int, record: bool):
    """The run_groups kernel for this geometry: a compiled-in one for the models' geometries, else the generic."""
    geometry = (int(ways), int(n_partitions), int(pbits))
    if geometry not in _SPECIALIZED_GEOMETRIES:
        return run_groups
    key = (*geometry, bool(record))
    kernel = _RUN_GROUPS_VARIANTS.get(key)
    if kernel is None:
        kernel = _RUN_GROUPS_VARIANTS.setdefault(key, _make_run_groups(*geometry, int(bool(record))))
    return kernel
