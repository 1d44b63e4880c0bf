"""Stamped matmul timelines and launches, shared by benchmarks/sim_validation's scripts: order tables, the stamp
archives' keys and loaders, and the measured schedules they give the simulator to replay.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from swizzlelab.sim import Schedule
from swizzlelab.sim.kernels import near_partition
from swizzlelab.swizzle import to_permutation
from swizzlelab.swizzle.families import parse_order
from swizzlelab.tasks.matmul.kernel import GPU_CONFIG, swizzle_args, tile_grid

WAVE = 264  # programs resident at once on the H100 for this kernel (132 SMs x occupancy 2, ncu)
STEADY_FROM = 2 * WAVE  # launches from the third wave on: past the launch's first, all-at-once wave


def order_key(order: str) -> str:
    """An order spec as a key of the stamp archives ('grouped:GROUP_M=8' -> 'grouped_GROUP_M8')."""
    return order.replace(":", "_").replace("=", "")


def stamped_stems(files, case: str, order: str) -> list[str]:
    """The '<case>__<order key>_rN' stems of every stamped run of (case, order) in a launches archive's `files`."""
    return sorted({name.rsplit("_", 1)[0] for name in files if name.startswith(f"{case}__{order_key(order)}_r")})


def load_timelines(source: Path) -> dict[str, dict[str, np.ndarray]]:
    """{case: {'<order key>_r0_sm' | _start | _step: array}} from a probe folder or a packed archive."""
    if source.is_dir():
        return {path.stem.removeprefix("timeline_"): dict(np.load(path)) for path in sorted(source.glob("timeline_*.npz"))}
    packed = np.load(source)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in packed.files:
        case, _, key = name.partition("__")
        out.setdefault(case, {})[key] = packed[name]
    return out


def start_slope(start: np.ndarray, duration: np.ndarray) -> float:
    """Least-squares slope of the programs' durations on their start times (both in steps)."""
    x = start - start.mean()
    return round(float((x * (duration - duration.mean())).sum() / max(float((x * x).sum()), 1e-9)), 3)


def order_table(order: str, m: int, n: int, k: int) -> np.ndarray:
    """Tile (row-major index) of each launch position for order spec `order` ('grouped:GROUP_M=8' style), as the
    validation's traces take it."""
    args, consts = swizzle_args(m=m, n=n, k=k, config=GPU_CONFIG)
    perm = to_permutation(parse_order(order), tile_grid(m=m, n=n, config=GPU_CONFIG), args, consts)
    return np.asarray(perm.perm, dtype=np.int32)


# Which L2 partition is near each program's SM. The model hashes the launch position; the hardware's map from
# %smid to partition is not documented, so the replay tries the candidates and ncu's far lookups
# (lts__t_sectors_srcunit_ltcfabric) say which one the H100 has.
NEAR_MAPS = ("hash", "sm_half", "sm_parity", "tpc_parity")


def near_of(mode: str, sm: np.ndarray, n_partitions: int) -> np.ndarray:
    """Near partition of each launch position's program under map `mode`."""
    if mode == "hash":
        return np.array([near_partition(p, n_partitions) for p in range(sm.size)], dtype=np.int8)
    if mode == "sm_half":
        return (sm * n_partitions // (int(sm.max()) + 1)).astype(np.int8)
    if mode == "sm_parity":
        return (sm % n_partitions).astype(np.int8)
    if mode == "tpc_parity":
        return ((sm // 2) % n_partitions).astype(np.int8)
    raise SystemExit(f"unknown near map {mode!r}; one of {', '.join(NEAR_MAPS)}")


def stamped_schedule(start: np.ndarray, lengths: np.ndarray, order: str, tile_step_ptr: np.ndarray, perm: np.ndarray,
                     near: np.ndarray) -> tuple[Schedule, float]:
    """The schedule of programs that started at `start` (ns, launch order) and ran k-steps of `lengths` (ns, one row
    a program), times in median step lengths; and that median in ns."""
    start = start.astype(np.int64)
    lengths = lengths.astype(np.int64)
    t = np.concatenate([start[:, None], start[:, None] + np.cumsum(lengths, axis=1)[:, :-1]], axis=1)
    n_k = t.shape[1]
    if not np.all(np.diff(tile_step_ptr)[perm] == n_k):
        raise SystemExit(f"{order}: the trace's steps per tile differ from the timeline's {n_k} k-steps")
    steps = tile_step_ptr[perm][:, None] + np.arange(n_k)[None, :]
    step_ns = float(np.median(lengths))
    order_idx = np.argsort(t.ravel(), kind="stable")
    return Schedule(steps=steps.ravel()[order_idx].astype(np.int64),
                    near=np.broadcast_to(near[:, None], t.shape).ravel()[order_idx].astype(np.int8),
                    start=(t.ravel()[order_idx] - t.min()) / step_ns), step_ns


def labelled_launches(probe: dict, launches: list[dict]) -> list[tuple[tuple[str, str, str], dict]]:
    """((case, order, the probe's label of the launch), ncu counters) of every launch, in launch order."""
    labels = [(row["case"], row["order"], label) for row in probe["rows"] for label in row["launches"]]
    if len(labels) != len(launches):
        raise SystemExit(f"the probe made {len(labels)} launches and ncu profiled {len(launches)}: cannot pair them")
    return list(zip(labels, launches))


def stamped_counters(probe: dict, launches: list[dict]) -> dict[tuple[str, str, str], dict]:
    """{(case, order, 'r0'): ncu counters of that stamped launch}, through the probe's list of launches."""
    return {(case, order, label.removeprefix("stamped_")): counters
            for (case, order, label), counters in labelled_launches(probe, launches) if label.startswith("stamped_r")}


def even_schedule(sm, start, duration, n_k, order, tile_step_ptr, perm, n_partitions):
    """A stamped run's schedule with each program's n_k steps evenly spaced over its measured duration."""
    lengths = np.repeat((duration.astype(np.float64) / n_k)[:, None], n_k, axis=1)
    return stamped_schedule(start, lengths, order, tile_step_ptr, perm, near_of("hash", sm.astype(np.int64), n_partitions))
