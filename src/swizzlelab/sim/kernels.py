"""Numba kernels of the L2 simulator: an O(1) LRU cache with sector masks and the program scheduler.

Pure array code: the Python layer (swizzlelab.sim.simulate) validates inputs and builds the records.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from swizzlelab.sim.walk import (  # noqa: F401 - the statistics columns are part of this module's interface
    N_STATS,
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
    flush_sets,
    walk_records,
)


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


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_SET_SALT = np.uint64(0x2545F4914F6CDD1D)
_HOME_SALT = np.uint64(0x5BD1E9955BD1E995)
_UNIT_SALT = np.uint64(0x94D049BB133111EB)


def popcount_table() -> np.ndarray:
    """Number of set bits of each byte value (sector masks have at most 8 sectors)."""
    return np.array([bin(v).count("1") for v in range(256)], dtype=np.int64)


@njit(cache=True, inline="always")
def _slot_of(key: np.int64, shift: np.uint64) -> np.int64:
    # Fibonacci hashing: the top bits of key * golden ratio spread consecutive line ids over the table.
    return np.int64((np.uint64(key) * _GOLDEN) >> shift)


@njit(cache=True, inline="always")
def _bucket(line: np.int64, salt: np.uint64, n: np.int64) -> np.int64:
    """A hashed bucket 0..n-1 of a line (multiply-shift range reduction: no division in the hot loop)."""
    x = (np.uint64(line) ^ salt) * _MIX
    x = (x ^ (x >> np.uint64(31))) * _GOLDEN
    return np.int64(((x >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


def near_partition(position: int, n_partitions: int) -> int:
    """The L2 partition the engines put near the program at launch position `position` (the hash each program's slot
    takes when it loads one): for a measured schedule replayed under the model's own map."""
    return int(_bucket(np.int64(position), _UNIT_SALT, np.int64(n_partitions))) if n_partitions > 1 else 0


def home_partition(line: int, n_partitions: int) -> int:
    """The home L2 partition of a line under the hashed set map (`_set_and_home`, set map 0)."""
    return int(_bucket(np.int64(line), _HOME_SALT, np.int64(n_partitions))) if n_partitions > 1 else 0


@njit(cache=True, inline="always")
def _block_permutation(x: np.int64, limit: np.int64, key: np.uint64) -> np.int64:
    """A pseudo-random permutation of 0..limit-1 chosen by `key`: a 4-round Feistel network on the smallest even
    number of bits that holds limit, walked until it lands below limit (at most 4 steps expected)."""
    bits = np.int64(2)
    while (np.int64(1) << bits) < limit:
        bits += 2
    half = bits // 2
    mask = (np.int64(1) << half) - 1
    while True:
        left = x >> half
        right = x & mask
        for rnd in range(4):
            f = _bucket(right + (np.int64(rnd) << 40), key, mask + 1)
            left, right = right, left ^ f
        x = (left << half) | right
        if x < limit:
            return x


@njit(cache=True, inline="always")
def _set_and_home(line: np.int64, n_sets: np.int64, n_partitions: np.int64, set_map: np.int64):
    """(set index, home partition) of a line, by `set_map`:
    0 hashed: each a hash of the line;
    1 interleaved: the n_sets x n_partitions slots of each block of that many consecutive lines take one line each,
      in turn from a hashed offset per block;
    2 permuted: each block's lines take the slots in a pseudo-random order of the block's own.
    1 and 2 fill every set and partition evenly with a contiguous buffer, as the H100's L2 does; 2 also scatters
    lines a power of two apart as a hash does (benchmarks/sim_validation/dup_probe_*.json), where 1 keeps them in
    a few sets of one partition."""
    if set_map != 0:
        slots = n_sets * n_partitions
        q = line // slots
        r = line - q * slots
        if set_map == 1:
            idx = (r + _bucket(q, _SET_SALT, slots)) % slots
        else:
            key = (np.uint64(q) ^ _HOME_SALT) * _MIX
            idx = _block_permutation(r, slots, key ^ (key >> np.uint64(29)))
        st = idx // n_partitions
        return st, idx - st * n_partitions
    st = _bucket(line, _SET_SALT, n_sets) if n_sets > 1 else 0
    home = _bucket(line, _HOME_SALT, n_partitions) if n_partitions > 1 else 0
    return st, home


# The table interleaves keys and values (table[2i] = key, table[2i+1] = node) so one probe touches one
# cache line of the host CPU; -1 marks an empty slot.
@njit(cache=True)
def _table_lookup(table: np.ndarray, key: np.int64, shift: np.uint64) -> np.int64:
    mask = (table.shape[0] >> 1) - 1
    i = _slot_of(key, shift)
    while True:
        k = table[2 * i]
        if k == key:
            return table[2 * i + 1]
        if k == -1:
            return -1
        i = (i + 1) & mask


@njit(cache=True)
def _table_insert(table: np.ndarray, key: np.int64, node: np.int64, shift: np.uint64) -> None:
    mask = (table.shape[0] >> 1) - 1
    i = _slot_of(key, shift)
    while table[2 * i] != -1:
        i = (i + 1) & mask
    table[2 * i] = key
    table[2 * i + 1] = node


@njit(cache=True)
def _key_table(n_keys: np.int64):
    """An empty (key, node) table for up to n_keys keys at most half full, and its Fibonacci shift."""
    size = 1
    bits = 0
    while size < 2 * max(n_keys, 1):
        size *= 2
        bits += 1
    return np.full(2 * size, -1, dtype=np.int64), np.uint64(64 - max(bits, 1))


@njit(cache=True)
def _table_delete(table: np.ndarray, key: np.int64, shift: np.uint64) -> None:
    # Linear probing with backward-shift deletion keeps lookups tombstone-free.
    mask = (table.shape[0] >> 1) - 1
    i = _slot_of(key, shift)
    while table[2 * i] != key:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        k = table[2 * j]
        if k == -1:
            break
        home = _slot_of(k, shift)
        # Move the entry at j into the hole at i unless its home lies cyclically in (i, j].
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            table[2 * i] = k
            table[2 * i + 1] = table[2 * j + 1]
            i = j
    table[2 * i] = -1


# The cache's own table packs one entry per slot: key << NODE_BITS | node (-1 = empty), so a probe reads 8
# bytes; keys (line * partitions + partition) must stay below 2**(63 - NODE_BITS).
NODE_BITS = 24
MAX_NODES = 1 << NODE_BITS
MAX_KEY = 1 << (63 - NODE_BITS)
_NODE_MASK = (1 << NODE_BITS) - 1


@njit(cache=True, inline="always")
def _packed_lookup(table: np.ndarray, key: np.int64, shift: np.uint64) -> np.int64:
    mask = table.shape[0] - 1
    i = _slot_of(key, shift)
    while True:
        e = table[i]
        if e == -1:
            return -1
        if (e >> NODE_BITS) == key:
            return e & _NODE_MASK
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _packed_insert(table: np.ndarray, key: np.int64, node: np.int64, shift: np.uint64) -> None:
    mask = table.shape[0] - 1
    i = _slot_of(key, shift)
    while table[i] != -1:
        i = (i + 1) & mask
    table[i] = (key << NODE_BITS) | node


@njit(cache=True)
def _packed_delete(table: np.ndarray, key: np.int64, shift: np.uint64) -> None:
    # Linear probing with backward-shift deletion keeps lookups tombstone-free.
    mask = table.shape[0] - 1
    i = _slot_of(key, shift)
    while (table[i] >> NODE_BITS) != key:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = table[j]
        if e == -1:
            break
        home = _slot_of(e >> NODE_BITS, shift)
        # Move the entry at j into the hole at i unless its home lies cyclically in (i, j].
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            table[i] = e
            i = j
    table[i] = -1


# Where the key space is small enough, a direct map (key -> node, -1 = absent) replaces the hash table:
# one memory access per lookup, insert or delete instead of probe chains and backward shifts.
MAX_DIRECT_KEYS = 1 << 26


@njit(cache=True, inline="always")
def _find(table: np.ndarray, direct: np.ndarray, key: np.int64, shift: np.uint64) -> np.int64:
    if direct.shape[0] > 0:
        return np.int64(direct[key])
    return _packed_lookup(table, key, shift)


@njit(cache=True, inline="always")
def _put(table: np.ndarray, direct: np.ndarray, key: np.int64, node: np.int64, shift: np.uint64) -> None:
    if direct.shape[0] > 0:
        direct[key] = node
    else:
        _packed_insert(table, key, node, shift)


@njit(cache=True, inline="always")
def _drop(table: np.ndarray, direct: np.ndarray, key: np.int64, shift: np.uint64) -> None:
    if direct.shape[0] > 0:
        direct[key] = -1
    else:
        _packed_delete(table, key, shift)


@njit(cache=True)
def _new_cache(capacity: np.int64, n_sets: np.int64, hashed: bool):
    table_size = 1
    bits = 0
    while hashed and table_size < 2 * capacity:
        table_size *= 2
        bits += 1
    shift = np.uint64(64 - max(bits, 1))
    table = np.full(table_size, -1, dtype=np.int64)
    node_key = np.zeros(capacity, dtype=np.int64)
    # One record per node, [prev, next, valid sectors, dirty sectors]: a hit touches one host cache line for
    # its own node instead of four arrays (measured: 1.2-1.4x faster once programs drift apart).
    node_info = np.zeros(4 * capacity, dtype=np.int32)
    node_info[0::4] = -1
    node_info[1::4] = -1
    set_head = np.full(n_sets, -1, dtype=np.int64)
    set_tail = np.full(n_sets, -1, dtype=np.int64)
    set_count = np.zeros(n_sets, dtype=np.int64)
    return table, shift, node_key, node_info, set_head, set_tail, set_count


_RNG_PROGRAM = np.uint64(0xD1B54A32D192ED03)
_RNG_STEP = np.uint64(0x8CB92BA72F3D8DD7)
# The page-noise draw is its own stream: a step keeps its step_cv draw whether or not page noise is on.
_PAGE_SALT = np.uint64(0x5851F42D4C957F2D)
_PROGRAM_SALT = np.uint64(0x2545F4914F6CDD1D)  # a program's own pace (schedule_saturating's program_cv)


@njit(cache=True, inline="always")
def _splitmix(x: np.uint64) -> np.uint64:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def step_duration(cv: np.float64, seed: np.uint64, program: np.int64, step: np.int64) -> np.float64:
    """Time one step of a program takes, in mean step times: 1 - cv + cv * Exp(1), so mean 1, std `cv`.

    A fixed part plus an exponential part (memory latency behind a queue) keeps every duration >= 1 - cv > 0
    for cv <= 1. Drawn from a hash of (seed, program, step): the same program and step always take the same
    time, whatever order the slots run in, so results are reproducible and orders compare on equal terms.
    """
    if cv == 0.0:
        return 1.0
    x = _splitmix(seed ^ (np.uint64(program) * _RNG_PROGRAM) ^ (np.uint64(step) * _RNG_STEP))
    u = (np.float64(x >> np.uint64(11)) + 1.0) * (1.0 / 9007199254740992.0)  # uniform in (0, 1]
    return 1.0 - cv + cv * -np.log(u)


@njit(cache=True, inline="always")
def _before(slot_time, a, b) -> bool:
    # Earlier time first; equal times by slot index, so cv = 0 runs the slots round-robin in index order.
    ta = slot_time[a]
    tb = slot_time[b]
    return ta < tb or (ta == tb and a < b)


@njit(cache=True)
def _sift_down(heap, n, slot_time) -> None:
    """Restore the min-heap of slots (by time, then index) after its root changed."""
    i = 0
    s = heap[0]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(slot_time, heap[c + 1], heap[c]):
            c += 1
        if not _before(slot_time, heap[c], s):
            break
        heap[i] = heap[c]
        i = c
    heap[i] = s


@njit(cache=True, inline="always")
def _load_program(s, next_program, programs, tile_step_ptr, n_partitions, slot_step, slot_end, slot_prog,
                  slot_part):
    """Give slot s the next program of `programs` that has steps (programs without steps are skipped);
    returns (next_program, whether one was loaded)."""
    while next_program < programs.shape[0]:
        t = programs[next_program]
        next_program += 1
        if tile_step_ptr[t + 1] > tile_step_ptr[t]:
            slot_step[s] = tile_step_ptr[t]
            slot_end[s] = tile_step_ptr[t + 1]
            slot_prog[s] = next_program - 1
            slot_part[s] = _bucket(next_program - 1, _UNIT_SALT, n_partitions) if n_partitions > 1 else 0
            return next_program, True
    return next_program, False


@njit(cache=True, inline="always")
def _start_slots(n_slots, programs, tile_step_ptr, n_partitions):
    """`n_slots` resident-program slots, each given the next program with steps, all at time 0:
    (slot_step, slot_end, slot_part, slot_prog, slot_time, slot_lock, heap, n_active, next_program)."""
    slot_step = np.zeros(n_slots, dtype=np.int64)
    slot_end = np.zeros(n_slots, dtype=np.int64)
    slot_part = np.zeros(n_slots, dtype=np.int64)
    slot_prog = np.zeros(n_slots, dtype=np.int64)  # position of the slot's program in `programs`
    slot_time = np.zeros(n_slots, dtype=np.float64)  # when the slot's next step starts
    slot_lock = np.zeros(n_slots, dtype=np.float64)  # when it would start in lockstep (mean step times, summed)
    heap = np.zeros(n_slots, dtype=np.int64)  # active slots, a min-heap by (slot_time, slot)
    next_program = 0
    n_active = 0
    for s in range(n_slots):
        next_program, loaded = _load_program(s, next_program, programs, tile_step_ptr, n_partitions, slot_step,
                                             slot_end, slot_prog, slot_part)
        if loaded:
            heap[n_active] = s  # all at time 0 in increasing slot order: already a heap
            n_active += 1
    return slot_step, slot_end, slot_part, slot_prog, slot_time, slot_lock, heap, n_active, next_program


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one);
# the slot heap's arrays, inlined into each scheduler's loop.
@njit(cache=True, inline="always")
def _next_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions, slot_step, slot_end, slot_prog,
               slot_part, slot_time):
    """Slot s (the heap's top, its clock already moved on) goes to its program's next step, or takes the next
    program, or leaves the heap; the heap is restored. Returns (n_active, next_program)."""
    step = slot_step[s] + 1
    if step < slot_end[s]:
        slot_step[s] = step
    else:
        next_program, loaded = _load_program(s, next_program, programs, tile_step_ptr, n_partitions, slot_step,
                                             slot_end, slot_prog, slot_part)
        if not loaded:
            n_active -= 1
            heap[0] = heap[n_active]
    _sift_down(heap, n_active, slot_time)
    return n_active, next_program


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one);
# the slot heap's arrays and the progress model's values, inlined into each scheduler's loop.
@njit(cache=True, inline="always")
def _after_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions, step_cv, seed, slot_step,
                slot_end, slot_prog, slot_part, slot_time, step_scale, drift_decay, slot_lock):
    """Slot s (the heap's top) has run its current step: its next step starts after this one's duration (times
    step_scale[step] when that array is not empty), less `drift_decay` x the slot's drift (its clock minus its
    lockstep clock, slot_lock) when drift_decay > 0; a slot whose program is done takes the next one, or leaves the
    heap. Returns (n_active, next_program)."""
    step = slot_step[s]
    duration = step_duration(step_cv, seed, slot_prog[s], step - tile_step_ptr[programs[slot_prog[s]]])
    mean = 1.0
    if step_scale.shape[0] > 0:
        mean = step_scale[step]
        duration *= mean
    if drift_decay > 0.0:
        # Mean reversion (a discrete Ornstein-Uhlenbeck clock): the drift d = clock - lockstep clock becomes
        # (1 - drift_decay) d + (duration - its mean) each step, so it stays near step_cv / sqrt(2 drift_decay)
        # steps instead of growing as step_cv x sqrt(steps). The durations are the same draws (seed, program,
        # step); only how much of their excess a slot keeps changes. A clock never runs backwards (the max).
        slot_time[s] = max(slot_time[s] + duration - drift_decay * (slot_time[s] - slot_lock[s]), slot_time[s])
        slot_lock[s] += mean
    else:
        slot_time[s] += duration
    return _next_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions, slot_step, slot_end,
                      slot_prog, slot_part, slot_time)


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

@njit(cache=True, inline="always")
def _schedule_arrays(programs, tile_step_ptr):
    """Empty (steps int64, near int8, start f64) arrays for every step of `programs`."""
    n_total = 0
    for i in range(programs.shape[0]):
        t = programs[i]
        n_total += tile_step_ptr[t + 1] - tile_step_ptr[t]
    return (np.empty(n_total, dtype=np.int64), np.empty(n_total, dtype=np.int8),
            np.empty(n_total, dtype=np.float64))


@njit(cache=True, nogil=True)
def schedule_domain(
    step_ptr: np.ndarray,
    tile_step_ptr: np.ndarray,
    programs: np.ndarray,
    n_slots: np.int64,
    n_partitions: np.int64,
    step_cv: np.float64,
    seed: np.uint64,
    step_scale: np.ndarray,
    drift_decay: np.float64 = 0.0,
):
    """The steps of one domain in the order `run_domain` runs them, with each step's near partition and time.

    Same slots, heap, ties, step durations and drift decay as `run_domain`: (steps int64[n], near int8[n],
    start f64[n]).
    A non-empty `step_scale` (float64, one per step of the trace) multiplies each step's drawn duration.
    """
    out_step, out_near, out_time = _schedule_arrays(programs, tile_step_ptr)
    slot_step, slot_end, slot_part, slot_prog, slot_time, slot_lock, heap, n_active, next_program = _start_slots(
        n_slots, programs, tile_step_ptr, n_partitions)
    k = 0
    while n_active > 0:
        s = heap[0]
        out_step[k] = slot_step[s]
        out_near[k] = slot_part[s]
        out_time[k] = slot_time[s]
        k += 1
        n_active, next_program = _after_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions,
                                             step_cv, seed, slot_step, slot_end, slot_prog, slot_part, slot_time,
                                             step_scale, drift_decay, slot_lock)
    return out_step[:k], out_near[:k], out_time[:k]


@njit(cache=True, nogil=True)
def sample_accesses(step_ptr: np.ndarray, lines: np.ndarray, is_write: np.ndarray, set_home: np.ndarray,
                    pbits: np.int64, sample_every: np.int64, n_partitions: np.int64, ways: np.int64):
    """The accesses of every `sample_every`-th L2 set index, kept in trace order: (ptr int64[n_steps + 1], base
    int64[n]: first way of the access's (sampled set, home partition) in a table of n_sample x n_partitions x ways,
    line int64[n], read bool[n]). They depend on the trace alone, so a search computes them once for all orders."""
    n_steps = step_ptr.size - 1
    ptr = np.zeros(n_steps + 1, dtype=np.int64)
    pmask = (np.int64(1) << pbits) - 1
    for s in range(n_steps):
        count = 0
        for a in range(step_ptr[s], step_ptr[s + 1]):
            if (np.int64(set_home[a]) >> pbits) % sample_every == 0:
                count += 1
        ptr[s + 1] = ptr[s] + count
    n = ptr[n_steps]
    base = np.empty(n, dtype=np.int64)
    line = np.empty(n, dtype=np.int64)
    read = np.empty(n, dtype=np.bool_)
    k = 0
    for a in range(step_ptr[n_steps]):
        sh = np.int64(set_home[a])
        st = sh >> pbits
        if st % sample_every == 0:
            base[k] = ((st // sample_every) * n_partitions + (sh & pmask)) * ways
            line[k] = lines[a]
            read[k] = not is_write[a]
            k += 1
    return ptr, base, line, read


@njit(cache=True, nogil=True)
def sample_page_share(step_ptr: np.ndarray, lines: np.ndarray, set_home: np.ndarray, pbits: np.int64,
                      sample_every: np.int64, page_lines: np.int64, sample_ptr: np.ndarray) -> np.ndarray:
    """For each access `sample_accesses` keeps (same order; `sample_ptr` its ptr): 1 - 1/d, d the accesses of its
    step whose lines lie in its DRAM page of `page_lines` lines (itself included). 0 for a lone line per page; 0.5
    for rows of two lines."""
    n_steps = step_ptr.size - 1
    out = np.empty(sample_ptr[n_steps], dtype=np.float64)
    pages = np.empty(np.max(np.diff(step_ptr)) if n_steps else 0, dtype=np.int64)
    k = 0
    for s in range(n_steps):
        if sample_ptr[s + 1] == sample_ptr[s]:
            continue  # no access of this step is sampled
        a0 = step_ptr[s]
        a1 = step_ptr[s + 1]
        for a in range(a0, a1):
            pages[a - a0] = lines[a] // page_lines
        run = np.sort(pages[:a1 - a0])
        for a in range(a0, a1):
            if (np.int64(set_home[a]) >> pbits) % sample_every == 0:
                page = lines[a] // page_lines
                d = np.searchsorted(run, page, side="right") - np.searchsorted(run, page, side="left")
                out[k] = 1.0 - 1.0 / d
                k += 1
    return out


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one),
# and its loop is one piece: the progress model's terms act on each step's time where it is drawn.
@njit(cache=True, nogil=True)
def schedule_saturating(
    tile_step_ptr: np.ndarray,
    programs: np.ndarray,
    n_slots: np.int64,
    n_partitions: np.int64,
    step_cv: np.float64,
    seed: np.uint64,
    slot_speed: np.ndarray,
    sample_ptr: np.ndarray,
    sample_base: np.ndarray,
    sample_line: np.ndarray,
    sample_read: np.ndarray,
    n_sample_ways: np.int64,
    ways: np.int64,
    saturation_share: np.float64,
    window_steps: np.float64,
    miss_gain: np.float64,
    age_priority: np.float64,
    hot_load: np.float64,
    hot_window: np.float64,
    hot_power: np.float64,
    queue_cv: np.bool_,
    sample_page: np.ndarray,
    page_noise: np.float64,
    program_cv: np.float64 = 0.0,
):
    """The steps of one domain in the order they run when a step's time depends on where the GPU is bound:
    (steps int64[n], near int8[n], start f64[n]), as `schedule_domain` gives them.

    Each step takes its draw (`step_duration`) times (1 - u) x slot_speed[slot] + u, where u (0..1) is how
    saturated DRAM is: (share of recent reads that missed L2 / `saturation_share`) ** 4, capped at 1. The recent
    miss share is estimated live on a sample of the L2's sets (`sample_accesses`: step s's sampled accesses are
    sample_ptr[s]..sample_ptr[s+1]-1, each an LRU of `ways` lines starting at sample_base in a table of
    `n_sample_ways` entries), averaged with weight 1/`window_steps` per step run. So the
    slots' speeds (their SMs' share of the L2 bandwidth) set the pace while the programs are L2-bound and stop
    mattering once DRAM is the bottleneck, where every program waits on the same queue; there a step's DRAM part
    is 1 - miss_gain + miss_gain x its own sampled miss share / the recent one (at most 4x), so a program that
    trails a neighbour over shared lines hits and catches up.

    The contention terms (all off at 0 / False, which gives the model above exactly):
    * `hot_load` > 0: the SM pace also fades while reads crowd onto the same lines: each sampled line keeps a count
      of its recent reads (decaying by e per `hot_window` steps); q = (recent mean count / hot_load) ** hot_power,
      capped at 1, and the L2-bound part of a step is (1 - q) x slot_speed + q. Programs in lockstep read each
      shared line at once and wait on the L2 slice holding it, whatever their SM; apart, their GPCs' paths set the
      pace again.
    * `age_priority` > 0: while L2-bound, a step takes 1 + age_priority x (2 r - 1) of its time, r the share of the
      other resident programs that started before its program (older requests served first).
    * `queue_cv`: the draw (step_cv) applies to the DRAM queue part only (u x queued); L2-bound time is the pace's.
    * `page_noise` > 0: a step whose sampled read misses share DRAM pages (sample_page: `sample_page_share` of each
      sampled access) takes a second draw on its whole time, of spread page_noise x their mean share (at most 1):
      requests that find their DRAM row open are served first, so page-dense streams are served unevenly.
    * `program_cv` > 0: the L2-bound part of every step of a program takes one more draw, made once per program
      (`step_duration` of spread program_cv): a program's own pace, which independent step draws average away over
      its steps; behind a saturated DRAM every program waits on the same queue, as with its SM's pace.
    """
    out_step, out_near, out_time = _schedule_arrays(programs, tile_step_ptr)
    slot_step, slot_end, slot_part, slot_prog, slot_time, slot_lock, heap, n_active, next_program = _start_slots(
        n_slots, programs, tile_step_ptr, n_partitions)
    tags = np.full(n_sample_ways, -1, dtype=np.int64)  # each set's lines, most recently used first
    hot = hot_load > 0.0
    noisy = page_noise > 0.0
    n_hot = n_sample_ways if hot else 1
    tag_time = np.zeros(n_hot)  # when each sampled line was last read (contention terms only)
    tag_count = np.zeros(n_hot)  # its decayed count of recent reads
    born = np.zeros(n_slots)  # when each slot's program started
    current = slot_prog.copy()
    # age_priority needs, per step, how many resident programs started strictly before this one. Programs start in
    # nondecreasing time (the heap pops in time order), so give each start a sequence number and keep the resident
    # ones in a Fenwick tree: the count is a prefix sum up to the first start tied with this one's time, O(log n)
    # a step instead of a scan of every resident slot (spmv: 4224 slots, millions of steps).
    aged = age_priority != 0.0
    n_seq = programs.size + n_slots + 1 if aged else 1
    tree = np.zeros(n_seq + 1, dtype=np.int64)
    tie_first = np.zeros(n_seq, dtype=np.int64)
    slot_seq = np.zeros(n_slots, dtype=np.int64)
    seq = 0
    last_born = 0.0
    if aged:
        for j in range(n_active):  # the first programs all start at time 0: tied
            slot_seq[heap[j]] = seq
            _fenwick_add(tree, seq, 1)
            seq += 1
    keep = 1.0 - 1.0 / window_steps
    recent_miss = 0.0
    recent_read = 0.0
    recent_load = 0.0
    k = 0
    while n_active > 0:
        s = heap[0]
        now = slot_time[s]
        if slot_prog[s] != current[s]:
            current[s] = slot_prog[s]
            born[s] = now
            if aged:
                _fenwick_add(tree, slot_seq[s], -1)
                tie_first[seq] = tie_first[seq - 1] if seq > 0 and now == last_born else seq
                last_born = now
                slot_seq[s] = seq
                _fenwick_add(tree, seq, 1)
                seq += 1
        step = slot_step[s]
        out_step[k] = step
        out_near[k] = slot_part[s]
        out_time[k] = now
        k += 1
        misses = 0
        reads = 0
        load = 0.0
        paged = 0.0
        for a in range(sample_ptr[step], sample_ptr[step + 1]):
            base = sample_base[a]
            line = sample_line[a]
            # One pass finds the line and moves every line before it one way toward the LRU end (all of them on a
            # miss, which drops the least recently used): 15% less time than a search, then a move (same tags).
            t = tags[base]
            hit = t == line
            if hot:
                tt = tag_time[base]
                tc = tag_count[base]
            if not hit:
                for w in range(base + 1, base + ways):
                    u = tags[w]
                    tags[w] = t
                    t = u
                    if hot:
                        ut = tag_time[w]
                        uc = tag_count[w]
                        tag_time[w] = tt
                        tag_count[w] = tc
                        tt = ut
                        tc = uc
                    if u == line:
                        hit = True
                        break
                tags[base] = line
            if hot:
                c = tc * np.exp(-max(now - tt, 0.0) / hot_window) + 1.0 if hit else 1.0
                tag_time[base] = now
                tag_count[base] = c
            if sample_read[a]:
                reads += 1
                if hot:
                    load += c
                if not hit:
                    misses += 1
                    if noisy:
                        paged += sample_page[a]
        u = 0.0
        q = 0.0
        queued = 1.0
        if recent_read > 0.0:
            share = recent_miss / recent_read
            u = min(1.0, share / saturation_share) ** 4
            if hot:
                q = min(1.0, recent_load / recent_read / hot_load) ** hot_power
            if reads > 0 and share > 0.0:
                # Behind a saturated DRAM a step waits in proportion to its own misses.
                queued = 1.0 - miss_gain + miss_gain * min(misses / reads / share, 4.0)
        recent_miss = recent_miss * keep + misses
        recent_read = recent_read * keep + reads
        recent_load = recent_load * keep + load
        priority = 1.0
        if aged:
            older = _fenwick_prefix(tree, tie_first[slot_seq[s]])
            priority = 1.0 + age_priority * (2.0 * older / max(n_active - 1, 1) - 1.0)
        local = step - tile_step_ptr[programs[slot_prog[s]]]
        duration = step_duration(step_cv, seed, slot_prog[s], local)
        served = 1.0
        if noisy and misses > 0 and paged > 0.0:
            served = step_duration(min(1.0, page_noise * paged / misses), seed ^ _PAGE_SALT, slot_prog[s], local)
        own = step_duration(program_cv, seed ^ _PROGRAM_SALT, slot_prog[s], 0) if program_cv > 0.0 else 1.0
        if queue_cv:
            slot_time[s] += served * ((1.0 - u) * ((1.0 - q) * slot_speed[s] + q) * priority * own
                                      + u * queued * duration)
        else:
            slot_time[s] += served * duration * ((1.0 - u) * ((1.0 - q) * slot_speed[s] + q) * priority * own
                                                 + u * queued)
        resident = n_active
        n_active, next_program = _next_step(s, heap, n_active, next_program, programs, tile_step_ptr, n_partitions,
                                            slot_step, slot_end, slot_prog, slot_part, slot_time)
        if aged and n_active < resident:  # the slot left the heap: its program is no longer resident
            _fenwick_add(tree, slot_seq[s], -1)
    return out_step[:k], out_near[:k], out_time[:k]


@njit(cache=True, inline="always")
def _fenwick_add(tree, index, delta):  # pragma: no cover - numba
    i = index + 1
    while i < tree.shape[0]:
        tree[i] += delta
        i += i & -i


@njit(cache=True, inline="always")
def _fenwick_prefix(tree, end):  # pragma: no cover - numba
    """Sum of the entries at positions 0..end-1."""
    total = 0
    i = end
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@njit(cache=True, nogil=True)
def set_index_of(lines: np.ndarray, n_sets: np.int64, n_partitions: np.int64, pbits: np.int64, out: np.ndarray,
                 first: np.int64, last: np.int64, set_map: np.int64 = 0) -> None:
    """out[a] = set index << pbits | home partition of lines[a], for a in first..last-1 (the map `run_domain`
    uses, `_set_and_home`; n_partitions <= 2 ** pbits)."""
    for a in range(first, last):
        st, home = _set_and_home(lines[a], n_sets, n_partitions, set_map)
        out[a] = (st << pbits) | home



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

