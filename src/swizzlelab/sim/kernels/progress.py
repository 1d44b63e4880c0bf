"""The progress model (numba): which program's step runs next and when. Step durations, the slot heap,
`schedule_domain` (lockstep, random walk, drift decay) and `schedule_saturating` (DRAM saturation, contention).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from swizzlelab.sim.kernels.setmap import _GOLDEN, _MIX, _UNIT_SALT, _bucket

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
