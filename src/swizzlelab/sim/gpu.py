"""GPU backend of the set-partitioned L2 simulator: one CUDA thread per L2 set index walks that set's accesses.

numba.cuda runs sim.walk's walk (and beside it the L2 request coalescer's count) on the device and CuPy sorts the
access stream by set; both load only when used.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.sim import walk
from swizzlelab.sim.params import L2Geometry
from swizzlelab.sim.setup import Run

THREADS_PER_BLOCK = 64
# Device bytes per access of one domain's stream: records, set words, sort keys, the sort's order and its
# scratch, the sorted copies, the miss bytes, each record's step start time and program and their sorted copies
# (the coalescer's).
BYTES_PER_ACCESS = 8 + 4 + 4 + 8 + 16 + 8 + 4 + 4 + 2 + 24

# Threads keep their sets to themselves (the models' geometries; see gpu_kernels._make_walk_sets) rather than in
# one array in global memory, and (SHARED_SETS) in shared rather than local memory. All give the same results.
# The walk is latency-bound (one thread per set index: ~3 warps per SM on an H100): with the sets in local memory
# ncu measured 94.6% of issue slots without an eligible warp, 14 of 18.3 cycles between instructions waiting on
# L1TEX, L1 hit rate 53.7% (benchmarks/sim_speed/walk_ncu_h100.txt); shared memory cut the walk of matmul 8192
# from 108 to 38 ms (sim_speed_gpuhost_h100_orders.json).
LOCAL_SETS = True
SHARED_SETS = True

# How a domain's stream is built and put in set order; each pair gives the same records in the same order, and
# benchmarks/sim_speed timed them (its gpu_variants runs, in the raw data). EXPAND: "lanes" (a warp per step,
# consecutive lanes writing consecutive records) or "thread" (one thread per step). SORT: "gather2" (stable
# argsort of the keys, one kernel gathers records and set words, each set's bounds from a count of its keys) or
# "gather3" (stable argsort, the keys, records and set words gathered one by one, the bounds by a binary search of
# the sorted keys).
EXPAND = "lanes"
SORT = "gather2"
EXPAND_THREADS = 256

_LOCK = threading.Lock()  # one simulation on the device at a time (kernels, sort scratch, trace cache)
_TRACE_CACHE: dict[tuple[int, int, int], tuple[Any, tuple[Any, ...]]] = {}


@dataclass(frozen=True)
class Coalesce:
    """What the device needs to count the L2 request coalescer (kernels.coalesce_reads) on the walk's stream:
    each step's program, the window in mean step times, a whole line's sector mask."""

    step_tile: np.ndarray
    window: float
    full_mask: int


def simulated() -> bool:
    """True under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): kernels run on the CPU, arrays are NumPy's."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def _numba_cuda():
    # numba-cuda's array typing registers `overload(np.row_stack)` whenever NumPy >= 2.0 (numba-cuda 0.30.0-0.30.4,
    # numba/cuda/np/arrayobj.py; its np.trapz and np.in1d overloads are guarded by version, this one is not), and
    # NumPy 2.5 removed that alias: the first kernel compiled on the GPU host (numba-cuda 0.30, NumPy 2.5.2) failed
    # with "module 'numpy' has no attribute 'row_stack'". No numba-cuda release guards it, so the alias is given
    # back as what NumPy 2.0-2.4 defined it to be (vstack) before numba.cuda loads; on NumPy < 2.5 nothing changes.
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from numba import cuda

    return cuda


def versions() -> dict[str, str | None]:
    """Versions of the packages the GPU backend runs on (None: not installed), for benchmark records."""
    out: dict[str, str | None] = {"numpy": np.__version__}
    for name, dist in (("numba", "numba"), ("numba_cuda", "numba-cuda"), ("cupy", None)):
        try:
            if dist is None:
                import cupy

                out[name] = cupy.__version__
            else:
                out[name] = importlib.metadata.version(dist)
        except Exception:  # noqa: BLE001 - a missing package is reported as None
            out[name] = None
    return out


def unavailable_reason() -> str | None:
    """Why the GPU backend cannot run here (None: it can)."""
    try:
        cuda = _numba_cuda()
    except Exception as err:  # noqa: BLE001 - any import failure means no backend
        return f"numba.cuda does not import ({err})"
    if simulated():
        return None
    try:
        if not cuda.is_available():
            return "no CUDA GPU visible to numba.cuda"
    except Exception as err:  # noqa: BLE001
        return f"numba.cuda cannot reach a GPU ({err})"
    try:
        import cupy  # noqa: F401
    except Exception as err:  # noqa: BLE001
        return f"CuPy does not import ({err})"
    return None


ENGINES = ("auto", "cpu", "gpu")


def choose_engine(asked: str) -> tuple[str, str]:
    """simulate()'s engine for a run that asks for `asked` ("auto": the GPU where this backend can run on a real one,
    else the CPU; "cpu"; "gpu": refused in one line where it cannot run), and a line saying which and why. Both
    engines give identical results; only the time differs."""
    if asked not in ENGINES:
        raise UserError(f"simulator engine {asked!r} is unknown: use one of {', '.join(ENGINES)}")
    if asked == "cpu":
        return "auto", "simulator on the CPU (asked for)"
    reason = unavailable_reason()
    if asked == "gpu":
        if reason:
            raise UserError(f"simulator engine gpu cannot run here: {reason}")
        return "gpu", "simulator on the GPU (asked for)"
    # The CUDA simulator runs the kernels on the CPU, far slower than the CPU engine: never chosen by itself.
    if reason is None and not simulated():
        return "gpu", "simulator on the GPU (found one; --sim-engine cpu keeps it off)"
    return "auto", f"simulator on the CPU ({reason or 'numba CUDA simulator'})"


def _xp():
    if simulated():
        return np
    import cupy

    return cupy


def _stable_argsort(xp, key):
    # CuPy's argsort is always stable (and takes no `kind`); NumPy's needs asking.
    return xp.argsort(key) if xp is not np else np.argsort(key, kind="stable")


def device_kernels():
    # numba.cuda loads here, when the GPU engine first runs: CPU-only commands never pay its start-up.
    _numba_cuda()
    from swizzlelab.sim import gpu_kernels

    return gpu_kernels


def _blocks(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks of `threads` that cover n threads (at least one)."""
    return max(1, -(-n // threads))


def _device_trace(xp, lines, masks, writes, set_home, step_ptr) -> tuple[Any, ...]:
    """The trace's arrays on the device, kept while the trace lives (a search simulates many orders of one)."""
    key = (id(lines), int(lines.size), id(set_home))
    hit = _TRACE_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    _TRACE_CACHE.clear()  # one trace at a time: device memory is the limit
    arrays = tuple(xp.asarray(a) for a in (lines, masks, writes, set_home, step_ptr))
    _TRACE_CACHE[key] = (weakref.ref(lines), arrays)
    return arrays


def release_device() -> None:
    """Give the device memory the simulator keeps (the cached trace, CuPy's pooled blocks) back to the driver, as
    before a kernel is timed on the same GPU; the next simulation uploads the trace again (milliseconds)."""
    with _LOCK:
        _TRACE_CACHE.clear()
        if not simulated() and "cupy" in sys.modules:
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()


def device_free_bytes(xp) -> int:
    """Device bytes the next allocations can take: the driver's free memory plus the blocks CuPy's pool keeps from
    earlier simulations (freed to the pool, not to the driver, so memGetInfo alone misses them; the pool hands them
    out again, and frees them all to retry an allocation the driver refuses)."""
    free, _ = xp.cuda.runtime.memGetInfo()
    return int(free) + int(xp.get_default_memory_pool().free_bytes())


def check_memory(xp, n_access: int, set_bytes: int) -> None:
    if xp is np:
        return
    free = device_free_bytes(xp)
    need = n_access * BYTES_PER_ACCESS + set_bytes
    if need > free:
        raise UserError(
            f"the GPU simulator needs about {need / 1e9:.1f} GB of device memory for a domain of {n_access} accesses "
            f"but {free / 1e9:.1f} GB are free: use the CPU engine (engine='sets')"
        )


# Seconds each phase of the last simulation on the device took, summed over its domains (the benchmark records
# them; device work is synchronised at each phase's end, which costs microseconds).
LAST_PHASES: dict[str, float] = {}
# Whether the last simulation asked the device to count the coalescer, and whether it did (its tables held).
LAST_COALESCE: dict[str, bool] = {}


def _phase(xp, name: str, t0: float) -> float:
    if xp is not np:
        xp.cuda.Device().synchronize()
    now = time.perf_counter()
    LAST_PHASES[name] = LAST_PHASES.get(name, 0.0) + now - t0
    return now


class _Stream:
    """One domain's access stream on the device: `n` records and their set words, each record's step start time and
    program (the coalescer's; empty unless it counts) and sort key; once sorted (`_sort`), in set order, with where
    each set index's records start (`seg`) and the stream position of each sorted record (`order`). Arrays are
    dropped from it as soon as they are done with: device memory is the limit."""

    def __init__(self, rec, shw, key, ctime, ctile, n: int):
        self.rec, self.shw, self.key, self.ctime, self.ctile, self.n = rec, shw, key, ctime, ctile, n
        self.seg = self.order = None


def _expand(xp, k, dev_trace, sched, geometry: L2Geometry, n_simulated: int, local: bool,
            coalesce: Coalesce | None) -> _Stream:
    """The domain's steps expanded on the device into records, set words and sort keys (and, for the coalescer,
    each record's step start time and program)."""
    t0 = time.perf_counter()
    lines, masks, writes, set_home, step_ptr = dev_trace
    steps, near, _ = sched
    pbits = geometry.pbits
    # Where each step's records start in the domain's stream: a prefix sum on the device, which holds step_ptr.
    d_steps, d_near = xp.asarray(steps), xp.asarray(near)
    d_starts = xp.zeros(steps.size + 1, dtype=np.int64)
    xp.cumsum(step_ptr[d_steps + 1] - step_ptr[d_steps], out=d_starts[1:])
    n = int(d_starts[-1])
    check_memory(xp, n, geometry.n_sets * geometry.n_partitions * geometry.ways * 8)
    rec = xp.empty(n, dtype=np.int64)
    shw = xp.empty(n, dtype=np.int32)
    # 16-bit sort keys where the sets allow (every model's L2): the stable radix sort then makes half the passes.
    key = xp.empty(n, dtype=np.int16 if n_simulated < np.iinfo(np.int16).max else np.int32)
    # Each record's step start time and program, for the coalescer (empty: not asked).
    c = n if coalesce is not None else 0
    k_time = xp.asarray(np.ascontiguousarray(sched[2], dtype=np.float64)) if c else xp.empty(0, dtype=np.float64)
    k_tile = (xp.asarray(np.ascontiguousarray(coalesce.step_tile[steps], dtype=np.int32)) if c
              else xp.empty(0, dtype=np.int32))
    ctime = xp.empty(c, dtype=np.float64)
    ctile = xp.empty(c, dtype=np.int32)
    t0 = _phase(xp, "upload_s", t0)
    args = (step_ptr, d_steps, d_near, d_starts, lines, masks, writes, set_home, np.int64(pbits),
            np.int64(n_simulated), np.int64((1 << pbits) - 1 if local else -1), rec, shw, key, k_time, k_tile, ctime,
            ctile)
    if EXPAND == "lanes":
        k.expand_lanes[_blocks(steps.size * k.EXPAND_LANES, EXPAND_THREADS), EXPAND_THREADS](*args)
    else:
        k.expand[_blocks(steps.size), THREADS_PER_BLOCK](*args)
    del args
    _phase(xp, "expand_s", t0)
    return _Stream(rec, shw, key, ctime, ctile, n)


def _sort(xp, k, stream: _Stream, n_simulated: int) -> None:
    """The stream's records put in set order by a stable sort of their keys (SORT picks how)."""
    t0 = time.perf_counter()
    rec, shw, ctime, ctile, n = stream.rec, stream.shw, stream.ctime, stream.ctile, stream.n
    key, stream.key = stream.key, None
    stream.rec = stream.shw = stream.ctime = stream.ctile = None
    c = ctime.size
    order = _stable_argsort(xp, key)
    if SORT == "gather2":
        # Keys below i, for each i: where set i's records start once sorted (the sorted keys are never needed).
        # (A kernel of its own: CuPy's bincount reduces the keys to their maximum first and fails on none.)
        counts = xp.zeros(n_simulated + 1, dtype=np.int64)
        k.count_keys[_blocks(n, EXPAND_THREADS), EXPAND_THREADS](key, counts)
        del key
        seg = xp.zeros(n_simulated + 1, dtype=np.int64)
        seg[1:] = xp.cumsum(counts[:n_simulated])
        sorted_rec = xp.empty(n, dtype=np.int64)
        sorted_shw = xp.empty(n, dtype=np.int32)
        sorted_ctime = xp.empty(c, dtype=np.float64)
        sorted_ctile = xp.empty(c, dtype=np.int32)
        k.gather_records[_blocks(n, EXPAND_THREADS), EXPAND_THREADS](order, rec, shw, ctime, ctile, sorted_rec,
                                                                     sorted_shw, sorted_ctime, sorted_ctile)
        rec, shw, ctime, ctile = sorted_rec, sorted_shw, sorted_ctime, sorted_ctile
        del sorted_rec, sorted_shw, sorted_ctime, sorted_ctile
    else:
        key = key[order]
        rec = rec[order]
        shw = shw[order]
        if c:
            ctime, ctile = ctime[order], ctile[order]
        seg = xp.searchsorted(key, xp.arange(n_simulated + 1, dtype=np.int32)).astype(np.int64)
        del key
    stream.rec, stream.shw, stream.ctime, stream.ctile, stream.seg, stream.order = rec, shw, ctime, ctile, seg, order
    _phase(xp, "sort_s", t0)


def _walk(xp, k, stream: _Stream, geometry: L2Geometry, n_simulated: int, record: bool, local: bool,
          coalesce: Coalesce | None) -> tuple[Any, Any, int]:
    """Every simulated set index's walk on the device, and beside it the coalescer's count: (statistics per set,
    DRAM-bound sectors per sorted record or empty, coalesced whole-line reads or -1)."""
    t0 = time.perf_counter()
    pbits, n_partitions, ways = geometry.pbits, geometry.n_partitions, geometry.ways
    walk_kernel, _ = k.walk_sets_for(ways, n_partitions, pbits, LOCAL_SETS, SHARED_SETS)
    sets = walk.new_sets(0 if local else geometry.n_sets * n_partitions, ways, xp)
    stats = xp.zeros((n_simulated, walk.N_STATS), dtype=np.int64)
    got = xp.zeros(stream.n if record else 0, dtype=np.uint8)
    counts = xp.zeros(n_simulated if coalesce is not None else 0, dtype=np.int64)
    overflow = xp.zeros(1, dtype=np.int64)
    if xp is not np:
        xp.cuda.Device().synchronize()  # the arrays above exist before the streams below start
    # The walk and the coalescer read the same sorted stream and write apart: each on a stream of its own, they
    # run side by side (both are latency-bound, a few warps per SM each).
    cuda = _numba_cuda()
    walk_stream, coalesce_stream = cuda.stream(), cuda.stream()
    with warnings.catch_warnings():
        # One thread per set index is the design: a sample of a few thousand sets is a small grid, and numba-cuda's
        # low-occupancy warning would only repeat that on every screening estimate.
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        grid = _blocks(n_simulated, k.WALK_THREADS)
        walk_kernel[grid, k.WALK_THREADS, walk_stream](
            *_unsynced(xp, stream.rec, stream.shw, stream.seg), np.int64(pbits), np.int64(n_partitions),
            np.int64(ways), *_unsynced(xp, sets, stats, got), np.int64(geometry.pair))
        if coalesce is not None:
            k.coalesce_sets_for()[grid, k.WALK_THREADS, coalesce_stream](
                *_unsynced(xp, stream.rec, stream.ctime, stream.ctile, stream.seg), np.float64(coalesce.window),
                np.int64(coalesce.full_mask), *_unsynced(xp, counts, overflow))
    walk_stream.synchronize()
    coalesce_stream.synchronize()
    _phase(xp, "walk_s" if coalesce is None else "walk_and_coalesce_s", t0)
    coalesced = -1
    if coalesce is not None and not int(overflow[0]):
        coalesced = int(counts.sum())
    return stats, got, coalesced


def run_domain_gpu(xp, dev_trace, sched, geometry: L2Geometry, n_simulated: int, record: bool,
                   coalesce: Coalesce | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """One domain on the device: (its statistics, its DRAM-bound sectors per stream access or an empty array,
    the whole-line reads of its simulated sets the L2 request coalescer merges: -1 if not asked or a thread's
    table ran out)."""
    k = device_kernels()
    _, local = k.walk_sets_for(geometry.ways, geometry.n_partitions, geometry.pbits, LOCAL_SETS, SHARED_SETS)
    stream = _expand(xp, k, dev_trace, sched, geometry, n_simulated, local, coalesce)
    _sort(xp, k, stream, n_simulated)
    stats, got, coalesced = _walk(xp, k, stream, geometry, n_simulated, record, local, coalesce)
    t0 = time.perf_counter()
    stream.ctime = stream.ctile = None
    total = stats.sum(axis=0)
    got_stream = np.zeros(0, dtype=np.uint8)
    if record:
        in_order = xp.zeros(stream.n, dtype=np.uint8)
        in_order[stream.order] = got
        got_stream = np.asarray(in_order) if xp is np else in_order.get()
    out = (np.asarray(total) if xp is np else total.get()).astype(np.int64)
    _phase(xp, "download_s", t0)
    return out, got_stream, coalesced


def _unsynced(xp, *arrays) -> tuple[Any, ...]:
    """CuPy arrays as numba device arrays that do not wait on CuPy's stream when a kernel takes them (numba would
    otherwise synchronise it at each launch, putting the walk's and the coalescer's streams back in line)."""
    if xp is np:
        return arrays
    cuda = _numba_cuda()
    return tuple(cuda.as_cuda_array(a, sync=False) for a in arrays)


def run_sets_gpu(run: Run, set_home: np.ndarray, schedules: dict[int, Any], record: bool,
                 coalesce: Coalesce | None = None) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], int]:
    """Every domain of `run` on the device: ({domain: statistics}, {domain: DRAM-bound sectors per stream access},
    whole-line reads of the simulated sets the coalescer merges: -1 if not asked (`coalesce`, one domain only) or not
    counted here (a thread's table ran out))."""
    reason = unavailable_reason()
    if reason:
        raise UserError(f"engine 'gpu' cannot run here: {reason}; use engine='sets' (the CPU; --engine sets on the "
                        "command line)")
    geometry = run.geometry
    if geometry.n_partitions > walk.MAX_PARTITIONS:
        raise UserError(f"the GPU simulator handles at most {walk.MAX_PARTITIONS} L2 partitions, got "
                        f"{geometry.n_partitions}")
    xp = _xp()
    lines, masks, writes, step_ptr, _ = run.trace
    with _LOCK:
        LAST_PHASES.clear()
        t0 = time.perf_counter()
        dev = _device_trace(xp, lines, masks, writes, set_home, step_ptr)
        _phase(xp, "trace_upload_s", t0)
        stats, got = {}, {}
        coalesced = -1
        if len(schedules) != 1:
            coalesce = None
        for d, sched in schedules.items():
            stats[d], got[d], coalesced = run_domain_gpu(xp, dev, sched, geometry, run.n_simulated, record, coalesce)
        if xp is not np:
            xp.cuda.Device().synchronize()
        LAST_COALESCE.clear()
        LAST_COALESCE.update(asked=coalesce is not None, counted=coalesced >= 0)
    return stats, got, coalesced
