"""The serial set-associative engine (numba): `run_domain` runs one L2 domain's programs through an O(1) LRU
cache with sector masks, near and home partitions, on the progress model's slots.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from swizzlelab.sim.kernels.progress import _after_step, _start_slots
from swizzlelab.sim.kernels.setmap import _set_and_home
from swizzlelab.sim.kernels.tables import _drop, _find, _new_cache, _put
from swizzlelab.sim.walk import (
    ST_DRAM_READ_SECTORS,
    ST_DRAM_WRITE_SECTORS,
    ST_EVICTIONS,
    ST_FABRIC_SECTORS,
    ST_HIT_SECTORS,
    ST_LINE_ACCESSES,
    ST_LINE_HITS,
    ST_LINE_LOOKUPS,
    ST_LOOKUP_SECTORS,
    ST_PROGRAMS,
    ST_REQ_SECTORS,
    ST_TCC_HITS,
    ST_WRITEBACK_LINES,
)


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one),
# and its loop is written out: helper calls there cost numba 2-3x (measured), so the LRU's steps stand inline.
@njit(cache=True, nogil=True)
def run_domain(
    lines: np.ndarray,
    sector_mask: np.ndarray,
    is_write: np.ndarray,
    step_ptr: np.ndarray,
    tile_step_ptr: np.ndarray,
    programs: np.ndarray,
    n_slots: np.int64,
    units: np.int64,
    n_partitions: np.int64,
    capacity: np.int64,
    n_sets: np.int64,
    popcount: np.ndarray,
    stats: np.ndarray,
    direct: np.ndarray,
    step_cv: np.float64,
    seed: np.uint64,
    step_scale: np.ndarray,
    step_miss: np.ndarray,
    live_speedup: np.float64 = 0.0,
    pair: np.int64 = 0,
    drift_decay: np.float64 = 0.0,
    set_map: np.int64 = 0,
) -> None:
    """Simulate one L2 domain: `programs` (tiles in launch order) run on `n_slots` slots in simulated time.

    Each step of a program takes `step_duration(step_cv, ...)` time units (mean 1); the slot whose program is
    earliest in time runs its next step (ties: lowest slot), and a slot that finishes takes the next program
    in launch order at its finishing time, so programs start when an earlier one ends, as on the hardware.
    `step_cv = 0` is strict lockstep: every slot one step in turn, round-robin. `drift_decay` > 0 pulls each slot's
    clock back toward its lockstep clock by that share of the difference every step (see _after_step).
    The domain's L2 is `n_partitions` caches of `capacity` lines, each in `n_sets` sets (1: fully
    associative), LRU within a set, with per-line valid and dirty sector masks. The k-th program of the
    domain runs next to a hashed partition of k: after the first wave a program lands on whichever SM
    frees first, so any fixed SM pattern would be an artefact. A line has one home partition; its set and home come
    from `_set_and_home` (`set_map` 0: hashed, 1: interleaved, 2: permuted).
    A read looks up the near partition; on a miss of a far-homed line it looks up the home partition over
    the fabric (a second lookup, as the hardware counts it) and keeps a copy near. A write passes the near
    partition (a lookup that counts as a hit; it updates a near copy if one is there, without allocating)
    and is kept at the home partition: write-back, write-allocate without a DRAM read, counted as sector hits
    (as ncu counts stores that fill whole sectors). `direct` is an int32 map of every key
    (line * n_partitions + partition) filled with -1, or empty to use the hash table. `pair` = 1: a read miss
    fetches the aligned 64-byte pair of each missing sector (as walk_records). A non-empty `step_scale` multiplies
    each step's drawn duration (schedule_domain); a non-empty `step_miss` (one per step of the trace) gets, for each
    step run, the number of its accesses that read from DRAM.
    """
    # The hot path is written out inline: helper calls here cost numba a 2-3x slowdown (measured).
    ways = capacity // n_sets
    count_miss = step_miss.shape[0] > 0
    if direct.shape[0] > 0:
        direct[:] = -1
    table, shift, node_key, node_info, set_head, set_tail, set_count = _new_cache(
        ways * n_sets * n_partitions, n_sets * n_partitions, direct.shape[0] == 0)
    n_used = 0
    n_programs = programs.shape[0]
    slot_step, slot_end, slot_part, slot_prog, slot_time, slot_lock, heap, n_active, next_program = _start_slots(
        n_slots, programs, tile_step_ptr, n_partitions)
    req = 0
    hit_sectors = 0
    accesses = 0
    line_hits = 0
    dram_read = 0
    dram_write = 0
    evictions = 0
    fabric = 0
    lookups = 0
    line_lookups = 0
    tcc_hits = 0
    writebacks = 0
    while n_active > 0:
        s = heap[0]
        step = slot_step[s]
        near = slot_part[s]
        for a in range(step_ptr[step], step_ptr[step + 1]):
            line = lines[a]
            m = sector_mask[a]
            w = is_write[a]
            req += popcount[m]
            lookups += popcount[m]
            accesses += 1
            line_lookups += 1
            st_in, home = _set_and_home(line, n_sets, n_partitions, set_map)
            if w and home != near:
                # A store to a far-homed line is looked up at the near partition on its way over the fabric:
                # ncu counts that pass too (a hit: a store fetches nothing). Seen on H100 transpose, where the
                # measured lts__t_sectors (1.55x requested) and hit rate (~51%) need it: without the near pass
                # the model gave 1.25x and 40%. A near copy of the line is updated, none is allocated.
                lookups += popcount[m]
                hit_sectors += popcount[m]
                fabric += popcount[m]
                line_lookups += 1
                nnode = _find(table, direct, line * n_partitions + near, shift)
                if nnode >= 0:
                    line_hits += 1
                    node_info[4 * nnode + 2] |= m
            first = home if w else near
            # The first lookup is at `first` (the near partition for a read, the home one for a store); a read that
            # missed sectors of a far-homed line looks up its home partition next, over the fabric. Both find,
            # promote or allocate with this one copy of the LRU steps, written out rather than called: a helper
            # inlined by numba (returning the node and its counts) ran this loop 2.1x slower, this loop 1.07x slower
            # than two written-out copies (engine "list", matmul 4096^3 grouped-8 on MI300X, one core, CPU time).
            part = first
            missing = m
            at_home = False
            while True:
                st = part * n_sets + st_in
                key = line * n_partitions + part
                node = _find(table, direct, key, shift)
                found = node >= 0
                if found:
                    line_hits += 1
                    v = node_info[4 * node + 2]
                    if set_head[st] != node:  # to the MRU end of its set
                        p = node_info[4 * node]
                        nx = node_info[4 * node + 1]
                        node_info[4 * p + 1] = nx
                        if nx >= 0:
                            node_info[4 * nx] = p
                        else:
                            set_tail[st] = p
                        node_info[4 * node] = -1
                        node_info[4 * node + 1] = set_head[st]
                        node_info[4 * set_head[st]] = node
                        set_head[st] = node
                else:
                    v = np.int32(0)
                    if set_count[st] == ways:  # the set's LRU line leaves, written back if dirty
                        node = set_tail[st]
                        dram_write += popcount[node_info[4 * node + 3]]
                        if node_info[4 * node + 3] != 0:
                            writebacks += 1
                        evictions += 1
                        _drop(table, direct, node_key[node], shift)
                        p = node_info[4 * node]
                        set_tail[st] = p
                        if p >= 0:
                            node_info[4 * p + 1] = -1
                        else:
                            set_head[st] = -1
                        set_count[st] -= 1
                    else:
                        node = n_used
                        n_used += 1
                    node_key[node] = key
                    node_info[4 * node + 2] = 0
                    node_info[4 * node + 3] = 0
                    _put(table, direct, key, node, shift)
                    node_info[4 * node] = -1
                    node_info[4 * node + 1] = set_head[st]
                    if set_head[st] >= 0:
                        node_info[4 * set_head[st]] = node
                    else:
                        set_tail[st] = node
                    set_head[st] = node
                    set_count[st] += 1
                if at_home:
                    hit_sectors += popcount[missing & v]
                    fetched = missing & ~v
                    if pair:
                        fetched = (fetched | ((fetched & 5) << 1) | ((fetched >> 1) & 5)) & ~v
                    dram_read += popcount[fetched]
                    if count_miss and fetched != 0:
                        step_miss[step] += 1
                    node_info[4 * node + 2] = v | missing | fetched
                    break
                # A store fills whole sectors in L2 without fetching them, which ncu counts as a hit.
                hit_sectors += popcount[m] if w else popcount[m & v]
                if found and (w or (m & ~v) == 0):
                    tcc_hits += 1
                missing = m & ~v
                if w:
                    node_info[4 * node + 3] |= m
                node_info[4 * node + 2] = v | m
                if missing == 0 or w:
                    break
                if first == home:
                    if pair:
                        # The aligned 64-byte pair of each missing sector comes from DRAM (walk_records).
                        extra = (((missing & 5) << 1) | ((missing >> 1) & 5)) & ~node_info[4 * node + 2]
                        node_info[4 * node + 2] |= extra
                        missing = missing | extra
                    dram_read += popcount[missing]
                    if count_miss:
                        step_miss[step] += 1
                    break
                fabric += popcount[missing]
                lookups += popcount[missing]
                line_lookups += 1
                part = home
                at_home = True
        if live_speedup > 0.0:
            n_acc = step_ptr[step + 1] - step_ptr[step]
            if n_acc > 0:
                step_scale[step] = 1.0 - live_speedup * (1.0 - step_miss[step] / n_acc)
        n_active, next_program = _after_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions,
                                             step_cv, seed, slot_step, slot_end, slot_prog, slot_part, slot_time,
                                             step_scale, drift_decay, slot_lock)
    # Write back what is still dirty at the end of the kernel.
    for node in range(n_used):
        dram_write += popcount[node_info[4 * node + 3]]
        if node_info[4 * node + 3] != 0:
            writebacks += 1
    stats[ST_REQ_SECTORS] += req
    stats[ST_HIT_SECTORS] += hit_sectors
    stats[ST_LINE_ACCESSES] += accesses
    stats[ST_LINE_HITS] += line_hits
    stats[ST_DRAM_READ_SECTORS] += dram_read
    stats[ST_DRAM_WRITE_SECTORS] += dram_write
    stats[ST_EVICTIONS] += evictions
    stats[ST_PROGRAMS] += n_programs
    stats[ST_LOOKUP_SECTORS] += lookups
    stats[ST_LINE_LOOKUPS] += line_lookups
    stats[ST_FABRIC_SECTORS] += fabric
    stats[ST_TCC_HITS] += tcc_hits
    stats[ST_WRITEBACK_LINES] += writebacks
