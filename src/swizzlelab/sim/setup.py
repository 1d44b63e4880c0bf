"""What a simulation runs on: the trace's arrays as the engines read them (TraceArrays), what is derived from them
once per trace and cached (set indices, set-group splits, sampled accesses), and one simulation's resolved setting (Run).
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.sim import kernels, walk
from swizzlelab.sim.params import (DRAM_PAGE_BYTES, SATURATION_SAMPLE_EVERY, L2Geometry, Progress, fetch_pair,
                                   partition_bits)
from swizzlelab.sim.result import Schedule


class TraceArrays(NamedTuple):
    """An access trace's arrays (swizzlelab.trace.AccessTrace), contiguous in the types the kernels take."""

    lines: np.ndarray  # int64 line ids
    masks: np.ndarray  # uint8 sector masks
    writes: np.ndarray  # bool stores
    step_ptr: np.ndarray  # int64 CSR: accesses of each step
    tile_step_ptr: np.ndarray  # int64 CSR: steps of each tile

    @property
    def n_tiles(self) -> int:
        return self.tile_step_ptr.size - 1

    @property
    def n_steps(self) -> int:
        return self.step_ptr.size - 1


def trace_arrays(trace: Any) -> TraceArrays:
    """The arrays of `trace`, checked (one line naming what is wrong)."""
    try:
        arrays = TraceArrays(
            np.ascontiguousarray(trace.lines, dtype=np.int64),
            np.ascontiguousarray(trace.sector_mask, dtype=np.uint8),
            np.ascontiguousarray(trace.is_write, dtype=np.bool_),
            np.ascontiguousarray(trace.step_ptr, dtype=np.int64),
            np.ascontiguousarray(trace.tile_step_ptr, dtype=np.int64),
        )
    except AttributeError as err:
        raise UserError(f"not an access trace ({err}): pass a swizzlelab.trace.AccessTrace") from None
    lines, masks, writes, step_ptr, tile_step_ptr = arrays
    if not (lines.shape == masks.shape == writes.shape):
        raise UserError("access trace arrays lines/sector_mask/is_write differ in length: rebuild the trace")
    if step_ptr.size == 0 or step_ptr[-1] != lines.size or tile_step_ptr.size == 0 or tile_step_ptr[-1] != step_ptr.size - 1:
        raise UserError("access trace CSR pointers do not match its arrays: rebuild the trace")
    return arrays


def as_perm(perm: Any, n_tiles: int) -> np.ndarray:
    """`perm` (an array or a Permutation) as the int64 launch order of the trace's tiles, checked."""
    array = np.asarray(getattr(perm, "perm", perm))
    if array.ndim != 1 or array.shape[0] != n_tiles:
        raise UserError(
            f"launch order has {array.size} entries but the trace has {n_tiles} tiles: build the order on the "
            "same grid and sizes as the trace"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise UserError("launch order must hold integer tile indices")
    array = array.astype(np.int64, copy=False)
    if n_tiles and (array.min() < 0 or array.max() >= n_tiles or np.bincount(array, minlength=n_tiles).max() != 1):
        raise UserError(
            "launch order is not a permutation of the tiles: prove the formula with "
            "`swizzlelab check FORMULA --grid ...`, which names the tiles never run or run twice"
        )
    return np.ascontiguousarray(array)


def default_workers() -> int:
    """Threads worth running: the CPUs this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


# Host bytes per line access a search needs beyond the trace, measured by peak RSS (VmHWM) of searches of
# tests/fixtures/suggest/attention_mblock.py on a 2-core host: the per-trace caches its orders share (set indices,
# set-group splits, sampled accesses: ~20 B at 34M accesses screened exactly, ~23 B at 68M screened on a quarter
# of the sets, of which ~4 B the quarter's own split and samples, built at the first order screened), and each
# order simulated at the same time (68M on a quarter of the sets: 2.90 and 2.96 GiB peak on 1 and 4 threads, ~0.3
# B; 0.45 B for one order alone by tracemalloc), with a floor per order.
SHARED_BYTES_PER_ACCESS = 24
SAMPLED_BYTES_PER_ACCESS = 4
ORDER_BYTES_PER_ACCESS = 1
ORDER_MIN_BYTES = 32 << 20


def screening_bytes(n_access: int, built: bool, sampled: bool) -> tuple[int, int]:
    """(bytes the search's shared caches still take, bytes of each order simulated at once) for a trace of
    `n_access`; `built`: an exact simulation of the trace built its caches already (trace_known), `sampled`: the
    orders are screened on a sample of the sets."""
    shared = (SAMPLED_BYTES_PER_ACCESS if sampled else 0) if built else SHARED_BYTES_PER_ACCESS
    return shared * int(n_access), max(ORDER_BYTES_PER_ACCESS * int(n_access), ORDER_MIN_BYTES)


def trace_upper_bound_lines(trace: Any, n_access: int) -> int:
    """An upper bound on distinct lines (from the tensors' extents when the trace lists them)."""
    tensors = getattr(trace, "tensors", None) or []
    total = sum(int(getattr(t, "n_lines", 0)) for t in tensors)
    return min(total, n_access) if total > 0 else n_access


def footprint_of(trace: Any) -> tuple[int, int, int, int]:
    """(unique lines, touched sectors, sectors first touched by a read, sectors a read must miss when misses fetch
    64-byte sector pairs) over the whole trace."""
    lines, masks, writes, _, _ = trace_arrays(trace)
    bound = trace_upper_bound_lines(trace, lines.size)
    out = kernels.footprint(lines, masks, writes, np.int64(bound), kernels.popcount_table())
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


def compulsory_read_sectors(footprint: tuple[int, ...], model: HardwareModel) -> int:
    """Sectors every order must miss on a read (a lower bound of missed sectors and of DRAM sectors read): with
    sector-pair fetches a read of one sector also brings its partner, so only the first read of a pair must miss."""
    return footprint[3] if fetch_pair(model) and len(footprint) > 3 else footprint[2]


_SET_INDEX_CACHE: dict[tuple[int, int, int, int], tuple[Any, np.ndarray]] = {}
_LINE_RANGE_CACHE: dict[tuple[int, int], tuple[Any, tuple[int, int]]] = {}


def line_range(lines: np.ndarray) -> tuple[int, int]:
    """(lowest, highest) line id of a trace's line array, cached per array (each order of a search checks it)."""
    if lines.size == 0:
        return 0, -1
    key = (id(lines), int(lines.size))
    hit = _LINE_RANGE_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    found = (int(lines.min()), int(lines.max()))
    for stale in [k for k, (ref, _) in _LINE_RANGE_CACHE.items() if ref() is None]:
        del _LINE_RANGE_CACHE[stale]
    _LINE_RANGE_CACHE[key] = (weakref.ref(lines), found)
    return found


def set_index_array(lines: np.ndarray, n_sets: int, n_partitions: int, n_workers: int,
                    set_map: int = 0) -> np.ndarray:
    """L2 set index << partition bits | home partition of every access (`set_map`: 0 hashed, 1 interleaved,
    2 permuted; kernels.setmap._set_and_home), cached per trace array: a search simulates many orders of one trace, and
    both depend only on the line."""
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), int(set_map))
    return _built_once(_SET_INDEX_CACHE, key, lines,
                       lambda: _set_index_array(lines, n_sets, n_partitions, n_workers, set_map), 4)


def _set_index_array(lines: np.ndarray, n_sets: int, n_partitions: int, n_workers: int, set_map: int) -> np.ndarray:
    pbits = partition_bits(n_partitions)
    out = np.empty(lines.size, dtype=np.uint16 if (n_sets << pbits) <= 1 << 16 else np.int32)
    chunks = np.linspace(0, lines.size, max(n_workers, 1) + 1).astype(np.int64)

    def fill(i: int) -> None:
        kernels.set_index_of(lines, np.int64(n_sets), np.int64(n_partitions), np.int64(pbits), out,
                             np.int64(chunks[i]), np.int64(chunks[i + 1]), np.int64(set_map))

    if n_workers > 1 and lines.size > 1 << 20:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            list(pool.map(fill, range(n_workers)))
    else:
        for i in range(max(n_workers, 1)):
            fill(i)
    return out


_CACHE_LOCK = threading.Lock()
_BUILD_LOCKS: "weakref.WeakValueDictionary[tuple, Any]" = weakref.WeakValueDictionary()


class _BuildLock:
    """A lock per cache key (weakly held: gone once no thread waits on it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def _building(key: tuple) -> _BuildLock:
    """The lock under which one thread builds the cache entry `key` while the others wait for it: a search's
    threads start screening together, and each built its own copy of a per-trace structure otherwise (flash
    attention at 68M accesses screened on a quarter of the sets: ~0.24 GiB more peak per thread; on a 32-CPU host
    at 545M, past a 63 GiB limit)."""
    with _CACHE_LOCK:
        held = _BUILD_LOCKS.get(key)
        if held is None:
            held = _BuildLock()
            _BUILD_LOCKS[key] = held
        return held


def _cache_put(cache: dict, key: tuple, entry: tuple, limit: int) -> None:
    """Store `entry` (weakref to its trace array, value[, more weakrefs]), dropping entries whose array is gone and
    the oldest beyond `limit`. Under a lock: a search simulates orders on several threads (with --k-dir alternate
    each has a trace array of its own), and unlocked clean-ups raced on the same stale key."""
    with _CACHE_LOCK:
        for stale in [k for k, held in cache.items() if held[0]() is None]:
            cache.pop(stale, None)
        if len(cache) >= limit:
            cache.pop(next(iter(cache)))
        cache[key] = entry


def _built_once(cache: dict, key: tuple, lines: np.ndarray, build: Any, limit: int) -> Any:
    """The entry of `cache` for `key` and trace array `lines`, made by `build()` and stored (_cache_put) when missing;
    one thread builds it while the others asking for it wait (_building)."""
    hit = cache.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    build_lock = _building((id(cache), *key))  # held here: the registry keeps it only while someone does
    with build_lock.lock:
        hit = cache.get(key)
        if hit is not None and hit[0]() is lines:
            return hit[1]
        found = build()
        _cache_put(cache, key, (weakref.ref(lines), found), limit)
        return found


# Sets whose entries fill about this many bytes form one group: they stay in a host core's L2 cache while the
# group runs. At least MIN_GROUPS groups, so threads share the work evenly.
GROUP_BYTES = 256 * 1024
MIN_GROUPS = 16
_GROUP_CACHE: dict[tuple[int, ...], tuple[Any, "SetGroups", Any]] = {}


@dataclass(frozen=True)
class SetGroups:
    """A trace's accesses split by groups of L2 set indices (kernels.group_counts/group_fill): ptr[s, g] is where
    step s's records of group g start; sets group_sets[g]..group_sets[g+1]-1 belong to group g."""

    ptr: np.ndarray
    rec: np.ndarray
    shw: np.ndarray
    offset: np.ndarray
    group_sets: np.ndarray
    # The spans of the latest schedule asked for: the coalescer and the engine read the same ones.
    _last: list = field(default_factory=list, repr=False, compare=False)

    @property
    def n_groups(self) -> int:
        return int(self.group_sets.size - 1)

    def scheduled(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, last)[g, k]: group g's records of the k-th scheduled step, laid out group by group."""
        with _CACHE_LOCK:
            if self._last and self._last[0]() is steps:
                return self._last[1]
        dtype = np.int32 if self.rec.size < 1 << 31 else np.int64
        first = np.empty((self.n_groups, steps.size), dtype=dtype)
        last = np.empty((self.n_groups, steps.size), dtype=dtype)
        kernels.gather_spans(self.ptr, steps, first, last)
        with _CACHE_LOCK:
            self._last[:] = [weakref.ref(steps), (first, last)]
        return first, last


def group_bytes_per_access(max_step: int) -> int:
    """Host bytes a cached set-group split takes per access (record, set word, place in its step)."""
    return 8 + 4 + (2 if max_step < 1 << 15 else 4)


def set_groups(trace: TraceArrays, set_home: np.ndarray, geometry: L2Geometry, n_simulated: int) -> SetGroups | None:
    """The trace's accesses of sets 0..n_simulated-1 split into set groups, cached per trace (it does not depend
    on the order: a search reuses it for every candidate); None when it would not fit in the memory left."""
    lines = trace.lines
    n_sets, n_partitions, ways = geometry.n_sets, geometry.n_partitions, geometry.ways
    # The split depends on the set map too, which `set_home` (itself cached per trace and map) carries.
    key = (id(lines), int(lines.size), id(set_home), int(n_sets), int(n_partitions), int(ways), int(n_simulated))
    hit = _GROUP_CACHE.get(key)
    if hit is not None and hit[0]() is lines and hit[2]() is set_home:
        return hit[1]
    build = _building(("groups", *key))
    with build.lock:
        hit = _GROUP_CACHE.get(key)
        if hit is not None and hit[0]() is lines and hit[2]() is set_home:
            return hit[1]
        return _set_groups(trace, set_home, geometry, n_simulated, key)


def _set_groups(trace: TraceArrays, set_home: np.ndarray, geometry: L2Geometry, n_simulated: int,
                key: tuple) -> SetGroups | None:
    lines, masks, writes, step_ptr, _ = trace
    n_sets, n_partitions, ways = geometry.n_sets, geometry.n_partitions, geometry.ways
    longest = max_step(step_ptr)
    per_group = max(1, GROUP_BYTES // (n_partitions * walk.set_words(ways) * 8))
    n_groups = max(1, min(n_simulated, max(-(-n_simulated // per_group), MIN_GROUPS)))
    n_steps = step_ptr.size - 1
    need = lines.size * group_bytes_per_access(longest) * n_simulated // max(n_sets, 1) + n_groups * (n_steps + 1) * 16
    if need > available_memory_bytes() // 2:
        return None
    group_sets = np.linspace(0, n_simulated, n_groups + 1).astype(np.int64)
    group_of = np.full(n_sets, -1, dtype=np.int64)
    for g in range(n_groups):
        group_of[group_sets[g]:group_sets[g + 1]] = g
    pbits = np.int64(partition_bits(n_partitions))
    ptr = kernels.group_counts(set_home, step_ptr, pbits, group_of, np.int64(n_groups))
    n = int(ptr[-1, -1])
    rec = np.empty(n, dtype=np.int64)
    shw = np.empty(n, dtype=np.int32)
    offset = np.empty(n, dtype=np.int16 if longest < 1 << 15 else np.int32)
    kernels.group_fill(lines, masks, writes, set_home, step_ptr, pbits, group_of, ptr, rec, shw, offset)
    groups = SetGroups(ptr, rec, shw, offset, group_sets)
    _cache_put(_GROUP_CACHE, key, (weakref.ref(lines), groups, weakref.ref(set_home)), 2)  # exact and sampled
    return groups


_SAMPLE_CACHE: dict[tuple[int, ...], tuple[Any, tuple[np.ndarray, ...]]] = {}


def sampled_accesses(trace: TraceArrays, geometry: L2Geometry, n_workers: int) -> tuple[np.ndarray, ...]:
    """kernels.sample_accesses of a trace (the accesses of the sets the saturating model watches), cached per trace
    array: they do not depend on the order, so each order of a search pays only for its own schedule."""
    lines, _, writes, step_ptr, _ = trace
    n_sets, n_partitions, ways, set_map = geometry.n_sets, geometry.n_partitions, geometry.ways, geometry.set_map
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), int(ways), SATURATION_SAMPLE_EVERY,
           int(set_map))

    def build() -> tuple[np.ndarray, ...]:
        set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map)
        return kernels.sample_accesses(step_ptr, lines, writes, set_home, np.int64(partition_bits(n_partitions)),
                                       np.int64(SATURATION_SAMPLE_EVERY), np.int64(n_partitions), np.int64(ways))

    return _built_once(_SAMPLE_CACHE, key, lines, build, 2)


_PAGE_CACHE: dict[tuple[Any, ...], tuple[Any, np.ndarray]] = {}


def sampled_page_share(trace: TraceArrays, geometry: L2Geometry, sample_ptr: np.ndarray, n_workers: int,
                       line_bytes: int) -> np.ndarray:
    """kernels.sample_page_share of a trace (how densely each sampled access's step reads its DRAM page; `sample_ptr`
    from sampled_accesses), cached per trace array as sampled_accesses is."""
    lines, _, _, step_ptr, _ = trace
    n_sets, n_partitions, set_map = geometry.n_sets, geometry.n_partitions, geometry.set_map
    page_lines = max(DRAM_PAGE_BYTES // line_bytes, 1)
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), SATURATION_SAMPLE_EVERY, int(set_map),
           page_lines)
    def build() -> np.ndarray:
        set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map)
        return kernels.sample_page_share(step_ptr, lines, set_home, np.int64(partition_bits(n_partitions)),
                                         np.int64(SATURATION_SAMPLE_EVERY), np.int64(page_lines), sample_ptr)

    return _built_once(_PAGE_CACHE, key, lines, build, 2)


def trace_known(trace: Any) -> bool:
    """Whether the simulator's per-trace caches already hold this trace (its set indices were computed)."""
    lines = getattr(trace, "lines", None)
    with _CACHE_LOCK:
        return any(ref() is lines for ref, _ in _SET_INDEX_CACHE.values())


def max_step(step_ptr: np.ndarray) -> int:
    """Accesses of the trace's longest step."""
    return int(np.diff(step_ptr).max()) if step_ptr.size > 1 else 0


def step_tiles(tile_step_ptr: np.ndarray) -> np.ndarray:
    """The program (tile) each step of a trace belongs to: what the coalescer compares, on the CPU and the GPU."""
    return np.repeat(np.arange(tile_step_ptr.size - 1, dtype=np.int64), np.diff(tile_step_ptr))


@dataclass(frozen=True)
class Run:
    """One simulation, every input resolved and checked: what the engines and schedules read."""

    model: HardwareModel
    trace: TraceArrays
    geometry: L2Geometry
    progress: Progress
    n_slots: int  # resident programs per L2 domain
    n_workers: int  # host threads
    n_simulated: int  # L2 set indices simulated (all but for a sampled estimate)
    wave_chunk: int = 0  # launches of one domain per wave of a kernel with a barrier between waves (0: none)
    given: Schedule | None = None  # a schedule in place of the progress model's (replayed or saturating)

    def set_home(self) -> np.ndarray:
        """Set index << partition bits | home partition of every access (cached per trace)."""
        g = self.geometry
        return set_index_array(self.trace.lines, g.n_sets, g.n_partitions, self.n_workers, g.set_map)
