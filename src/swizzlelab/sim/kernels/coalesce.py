"""The L2 request coalescer and the trace footprint (numba): whole-line reads that join another program's
lookup within a window (serially or per set group), and a trace's unique lines and sectors.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from swizzlelab.sim.kernels.tables import _key_table, _table_insert, _table_lookup


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@njit(cache=True, nogil=True)
def coalesce_reads(lines: np.ndarray, sector_mask: np.ndarray, is_write: np.ndarray, step_ptr: np.ndarray,
                   sched_step: np.ndarray, sched_near: np.ndarray, sched_time: np.ndarray, step_tile: np.ndarray,
                   n_partitions: np.int64, window: np.float64, table_lines: np.int64, popcount: np.ndarray,
                   full_mask: np.int64) -> np.int64:
    """The L2 request coalescer: a read of a whole line (sector mask `full_mask`) that another program on the same
    side (near partition) read whole no more than `window` (mean step times) before, while that read is still the
    line's latest whole read from that side, joins it and makes no lookup of its own. Returns the sectors
    coalesced. Reads of part of a line never join nor are joined: on the H100 the kernels whose reads are
    partial (the narrow transpose's 16-byte rows, the histogram's bytes, spmv's gathers) lose no lookups to the
    coalescer while tiles share their sectors (docs/hit-rates.md).

    Steps run in schedule order (`sched_step`, near partitions `sched_near`, started at `sched_time`;
    `step_tile[step]` is the step's program). The first reader left the line in its near partition, so each
    coalesced sector is one near lookup and one hit the cache engines count and ncu does not. A program's own
    repeated reads are never coalesced (they are separate lookups on the hardware: the histogram's channels).
    `table_lines` bounds the distinct lines (footprint).
    """
    n_sides = max(n_partitions, 1)
    slots = max(table_lines, 1) * n_sides
    table, shift = _key_table(slots)
    last_time = np.empty(slots, dtype=np.float64)  # when the line's latest lookup from that side was made
    last_tile = np.empty(slots, dtype=np.int64)  # by which program
    coalesced = 0
    n_used = 0
    for k in range(sched_step.shape[0]):
        step = sched_step[k]
        t = sched_time[k]
        tile = step_tile[step]
        near = sched_near[k]
        for a in range(step_ptr[step], step_ptr[step + 1]):
            if is_write[a] or sector_mask[a] != full_mask:
                continue
            key = lines[a] * n_sides + near
            node = _table_lookup(table, key, shift)
            if node < 0:
                node = n_used
                n_used += 1
                if node >= slots:
                    raise ValueError("more unique lines than the table was sized for")
                _table_insert(table, key, node, shift)
            elif last_tile[node] != tile and t - last_time[node] <= window:
                coalesced += popcount[sector_mask[a]]
                continue
            last_time[node] = t
            last_tile[node] = tile
    return coalesced


@njit(cache=True, inline="always")
def _epoch_find(keys: np.ndarray, base: np.int64, key: np.int64, mask: np.int64) -> np.int64:
    """Slot of `key` in the linear-probing table keys[base : base + mask + 1], or -(first empty slot) - 1."""
    i = ((key * np.int64(0x1E3779B97F4A7C15)) >> 24) & mask
    while True:
        k = keys[base + i]
        if k == key:
            return base + i
        if k == -1:
            return -(base + i) - 1
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _epoch_clear(keys: np.ndarray, used: np.ndarray, n_used: np.ndarray, table: np.int64, table_slots: np.int64) -> None:
    """Empty table `table` of coalesce_groups by resetting only the slots it wrote."""
    for j in range(n_used[table]):
        keys[used[table * table_slots + j]] = -1
    n_used[table] = 0


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@njit(cache=True, nogil=True)
def coalesce_groups(first: np.ndarray, last: np.ndarray, rec: np.ndarray, g_lo: np.int64, g_hi: np.int64,
                    sched_step: np.ndarray, sched_near: np.ndarray, sched_time: np.ndarray, step_tile: np.ndarray,
                    n_partitions: np.int64, window: np.float64, popcount: np.ndarray, full_mask: np.int64,
                    table_slots: np.int64) -> np.int64:
    """`coalesce_reads` over groups g_lo..g_hi-1 of a set-group split (records as group_fill writes them; first[g, k]
    ..last[g, k]-1 are group g's records of the k-th scheduled step). A line lies in one group and keeps its reads'
    order there, so this counts exactly what coalesce_reads counts for those lines.

    Only a read of the last `window` mean step times can be joined (start times never decrease), so the state
    lives in two tables of `table_slots` (a power of two) that stay in a core's cache: the reads of the current
    epoch (start time // window) and of the one before; older reads are expired and their table is emptied for
    the next epoch. Returns -1 when one epoch's reads would fill a table more than half."""
    mask = np.int64(table_slots - 1)
    keys = np.full(2 * table_slots, -1, dtype=np.int64)
    times = np.empty(2 * table_slots, dtype=np.float64)
    tiles = np.empty(2 * table_slots, dtype=np.int64)
    used = np.empty(2 * table_slots, dtype=np.int64)  # slots written, per table, to empty them cheaply
    n_used = np.zeros(2, dtype=np.int64)
    n_sides = max(n_partitions, 1)
    limit = table_slots // 2
    coalesced = 0
    for g in range(g_lo, g_hi):
        _epoch_clear(keys, used, n_used, 0, table_slots)
        _epoch_clear(keys, used, n_used, 1, table_slots)
        # The first read's epoch starts the tables: start times can be negative (the contention model's start
        # jitter moves the first steps before 0), so no fixed epoch may stand for "none yet".
        epoch = np.int64(0)
        started = False
        cur = 0
        for k in range(sched_step.shape[0]):
            lo = first[g, k]
            hi = last[g, k]
            if lo == hi:
                continue
            step = sched_step[k]
            t = sched_time[k]
            e = np.int64(np.floor(t / window))
            if not started:
                epoch = e
                started = True
            while epoch < e:
                # The other table holds epoch - 1: expired once the epoch moves on; it becomes the current one.
                epoch += 1
                cur = 1 - cur
                _epoch_clear(keys, used, n_used, cur, table_slots)
                if epoch < e - 1:
                    epoch = e - 1  # every older read has expired: emptying both tables is enough
            tile = step_tile[step]
            near = np.int64(sched_near[k])
            base_cur = cur * table_slots
            base_prev = (1 - cur) * table_slots
            for r_i in range(lo, hi):
                r = rec[r_i]
                sectors = r & 15
                if (r >> 4) & 1 or sectors != full_mask:
                    continue
                key = (r >> 8) * n_sides + near
                # The line's latest read from this side within the window: this epoch's entry (less than a
                # window ago), else the previous epoch's if it is recent enough.
                slot = _epoch_find(keys, base_cur, key, mask)
                latest = slot
                if slot < 0:
                    latest = _epoch_find(keys, base_prev, key, mask)
                    if latest >= 0 and t - times[latest] > window:
                        latest = -1
                if latest >= 0 and tiles[latest] != tile:
                    coalesced += popcount[sectors]
                    continue
                if slot < 0:
                    if n_used[cur] >= limit:
                        return -1
                    slot = -slot - 1
                    keys[slot] = key
                    used[base_cur + n_used[cur]] = slot
                    n_used[cur] += 1
                times[slot] = t
                tiles[slot] = tile
    return coalesced


@njit(cache=True, nogil=True)
def footprint(lines: np.ndarray, sector_mask: np.ndarray, is_write: np.ndarray, table_lines: np.int64,
              popcount: np.ndarray) -> np.ndarray:
    """Unique lines, union-of-sectors count, and sectors whose first touch is a read, over a whole trace.

    Returns int64[4]: n_unique_lines, touched_sectors, first_read_sectors, and the sectors a read must miss when
    misses fetch aligned 64-byte sector pairs (those a read requests from a pair nothing touched before).
    """
    table, shift = _key_table(table_lines)
    touched = np.zeros(max(table_lines, 1), dtype=np.uint8)
    first_read = np.zeros(max(table_lines, 1), dtype=np.uint8)
    n_unique = 0
    pair_first = 0
    for a in range(lines.shape[0]):
        line = lines[a]
        m = sector_mask[a]
        node = _table_lookup(table, line, shift)
        if node < 0:
            node = n_unique
            n_unique += 1
            if node >= touched.shape[0]:
                raise ValueError("more unique lines than the table was sized for")
            _table_insert(table, line, node, shift)
        fresh = m & ~touched[node]
        if not is_write[a]:
            first_read[node] |= fresh
            for pair in (3, 12):
                if (touched[node] & pair) == 0:
                    pair_first += popcount[m & pair]
        touched[node] |= m
    out = np.zeros(4, dtype=np.int64)
    out[3] = pair_first
    out[0] = n_unique
    for node in range(n_unique):
        out[1] += popcount[touched[node]]
        out[2] += popcount[first_read[node]]
    return out
