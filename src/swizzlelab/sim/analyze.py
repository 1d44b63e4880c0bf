"""Memory analysis of an access trace: footprints, reuse, which programs share data, best reachable hit rate.

Figures derived from the trace alone are labelled "from trace"; cache figures are predictions of a model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numba import njit

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel, domain_programs, get_model
from swizzlelab.sim import kernels
from swizzlelab.fmt import fmt_bytes
from swizzlelab.sim.result import SimResult
from swizzlelab.sim.setup import compulsory_read_sectors, footprint_of, line_range
from swizzlelab.sim.simulate import simulate

# Dense per-line arrays (~22 bytes a line) are used up to this span of line ids; sparser ids are compacted.
MAX_DENSE_LINES = 1 << 25
N_SHARING_SAMPLES = 16


@dataclass(frozen=True)
class TensorStats:
    """Footprint and reuse of one tensor (all from the trace)."""

    name: str
    touched_bytes: int  # distinct sectors touched x sector size (compulsory traffic)
    requested_bytes: int  # every access counted
    lines_touched: int
    programs_per_line_mean: float
    programs_per_line_max: int

    @property
    def reuse(self) -> float:
        return self.requested_bytes / self.touched_bytes if self.touched_bytes else 0.0


@dataclass(frozen=True)
class Sharing:
    """Mean fraction of one program's lines of `tensor` also touched by a partner program in `relation`."""

    tensor: str
    relation: str  # e.g. "same pid_m", "same pid_n", "different pid_m and pid_n", "next tile", "far tile"
    fraction: float
    n_pairs: int

    def statement(self) -> str:
        pct = 100 * self.fraction
        amount = "none" if pct < 0.5 else f"{pct:.0f}%"
        return f"programs with {self.relation} share {amount} of their {self.tensor} lines (from trace)"


@dataclass(frozen=True)
class Period:
    """On a 1-D grid: programs sharing lines of `tensor` are mostly a multiple of `period` indices apart."""

    tensor: str
    period: int
    fraction: float  # of sampled sharing pairs (programs adjacent in a line's sorted sharer list) at a multiple
    n_pairs: int
    median_distance: float

    def statement(self) -> str:
        return (
            f"programs sharing {self.tensor} lines are a multiple of {self.period} indices apart "
            f"({100 * self.fraction:.0f}% of {self.n_pairs} sampled sharing pairs, median distance "
            f"{self.median_distance:.0f}): running residue classes mod {self.period} together brings them "
            "next to each other (from trace)"
        )


@dataclass(frozen=True)
class Analysis:
    """What a trace says about memory reuse, plus predicted L2 figures for the identity (and a given) order."""

    model: str
    occupancy: int
    grid: tuple[int, ...]
    n_programs: int
    line_accesses: int
    requested_bytes: int
    compulsory_bytes: int  # every touched sector once
    compulsory_read_bytes: int  # sectors whose first touch is a read (with 64-byte pair fetches: the first read
    # of each pair): they must come from DRAM
    best_hit_rate: float  # 1 - compulsory_read / requested: stores count as hits
    bytes_per_program_mean: float
    bytes_per_program_max: int
    unique_bytes_per_program_mean: float
    unique_bytes_per_program_max: int
    programs_per_line_mean: float
    programs_per_line_max: int
    tensors: tuple[TensorStats, ...]
    sharing: tuple[Sharing, ...]
    identity: SimResult
    current: SimResult | None = None
    current_label: str = ""
    statements: tuple[str, ...] = field(default_factory=tuple)
    periods: tuple[Period, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "occupancy": self.occupancy,
            "grid": list(self.grid),
            "n_programs": self.n_programs,
            "line_accesses": self.line_accesses,
            "requested_bytes": self.requested_bytes,
            "compulsory_bytes": self.compulsory_bytes,
            "compulsory_read_bytes": self.compulsory_read_bytes,
            "best_hit_rate": self.best_hit_rate,
            "bytes_per_program_mean": self.bytes_per_program_mean,
            "bytes_per_program_max": self.bytes_per_program_max,
            "unique_bytes_per_program_mean": self.unique_bytes_per_program_mean,
            "unique_bytes_per_program_max": self.unique_bytes_per_program_max,
            "programs_per_line_mean": self.programs_per_line_mean,
            "programs_per_line_max": self.programs_per_line_max,
            "tensors": [{**asdict(t), "reuse": t.reuse} for t in self.tensors],
            "sharing": [{**asdict(s), "statement": s.statement()} for s in self.sharing],
            "periods": [{**asdict(p), "statement": p.statement()} for p in self.periods],
            "statements": list(self.statements),
            "identity": self.identity.to_dict(),
            "current": None if self.current is None else self.current.to_dict(),
            "current_label": self.current_label,
            "labels": {
                "from_trace": ["requested_bytes", "compulsory_bytes", "best_hit_rate", "tensors", "sharing",
                               "periods"],
                "predicted": f"predicted (model {self.model}): identity, current",
            },
        }

    def text(self) -> str:
        tag = f"predicted (model {self.model}, occupancy {self.occupancy})"
        out = [
            f"grid {self.grid}: {self.n_programs} programs, {self.line_accesses:,} line accesses (from trace)",
            "",
            f"{'tensor':<14}{'touched':>12}{'requested':>12}{'reuse':>8}{'progs/line':>12}{'max':>6}",
        ]
        for t in self.tensors:
            out.append(
                f"{t.name:<14}{fmt_bytes(t.touched_bytes):>12}{fmt_bytes(t.requested_bytes):>12}"
                f"{t.reuse:>7.1f}x{t.programs_per_line_mean:>12.2f}{t.programs_per_line_max:>6}"
            )
        out += [
            "(from trace)",
            "",
            f"bytes per program        mean {fmt_bytes(self.bytes_per_program_mean)}, max "
            f"{fmt_bytes(self.bytes_per_program_max)} requested; mean {fmt_bytes(self.unique_bytes_per_program_mean)}"
            f" distinct (from trace)",
            f"programs per line        mean {self.programs_per_line_mean:.2f}, max {self.programs_per_line_max}"
            " (from trace)",
            f"compulsory DRAM bytes    {fmt_bytes(self.compulsory_bytes)}, of which reads "
            f"{fmt_bytes(self.compulsory_read_bytes)} (from trace)",
            f"requested from L2        {fmt_bytes(self.requested_bytes)} (from trace)",
            f"best hit rate any order  {100 * self.best_hit_rate:.2f} % (from trace: 1 - compulsory reads/requested;"
            " stores count as hits)",
            "",
            "sharing:",
        ]
        out += [f"  {s}" for s in self.statements]
        out += [
            "",
            f"identity order: L2 hit {100 * self.identity.l2_hit_rate:.2f} %, DRAM read "
            f"{fmt_bytes(self.identity.dram_read_bytes)}  {tag}",
        ]
        if self.current is not None:
            out.append(
                f"{self.current_label or 'given order'}: L2 hit {100 * self.current.l2_hit_rate:.2f} %, DRAM read "
                f"{fmt_bytes(self.current.dram_read_bytes)}  {tag}"
            )
        return "\n".join(out)


@njit(cache=True)
def _line_pass(lines, masks, step_ptr, tile_step_ptr, offset, n_dense, popcount):
    """Per dense line: programs touching it, union sector mask, requested sectors; per tile: distinct lines."""
    n_tiles = tile_step_ptr.shape[0] - 1
    last_tile = np.full(n_dense, -1, dtype=np.int64)
    programs = np.zeros(n_dense, dtype=np.int32)
    union = np.zeros(n_dense, dtype=np.uint8)
    requested = np.zeros(n_dense, dtype=np.int64)
    tile_requested = np.zeros(n_tiles, dtype=np.int64)
    tile_unique_sectors = np.zeros(n_tiles, dtype=np.int64)
    tile_mask = np.zeros(n_dense, dtype=np.uint8)
    for t in range(n_tiles):
        a0 = step_ptr[tile_step_ptr[t]]
        a1 = step_ptr[tile_step_ptr[t + 1]]
        for a in range(a0, a1):
            d = lines[a] - offset
            m = masks[a]
            requested[d] += popcount[m]
            tile_requested[t] += popcount[m]
            union[d] |= m
            if last_tile[d] != t:
                last_tile[d] = t
                programs[d] += 1
                tile_mask[d] = m
            else:
                tile_mask[d] |= m
        for a in range(a0, a1):
            d = lines[a] - offset
            if tile_mask[d] != 0:
                tile_unique_sectors[t] += popcount[tile_mask[d]]
                tile_mask[d] = 0
    return programs, union, requested, tile_requested, tile_unique_sectors


# nogil: the search screens candidates on threads, and time under the GIL runs one thread at a time (this count was
# most of a candidate's time under it).
@njit(cache=True, nogil=True)
def _wave_counts(lines, step_ptr, tile_step_ptr, tiles, domain, n_domains, span):  # pragma: no cover - numba
    """Per tile: distinct lines; per domain: distinct lines; lines read by more than one domain.

    Stamp arrays over the dense line range replace sets: a line counts once per tile / per domain."""
    tile_stamp = np.full(span, -1, np.int64)
    domain_stamp = np.full(span, -1, np.int64)
    first_domain = np.full(span, -1, np.int64)
    multi = np.zeros(span, np.uint8)
    per_tile = np.zeros(tiles.size, np.int64)
    per_domain = np.zeros(n_domains, np.int64)
    n_multi = 0
    n_all = 0
    for i in range(tiles.size):
        t = tiles[i]
        d = domain[i]
        lo = step_ptr[tile_step_ptr[t]]
        hi = step_ptr[tile_step_ptr[t + 1]]
        for a in range(lo, hi):
            line = lines[a]
            if tile_stamp[line] != i:
                tile_stamp[line] = i
                per_tile[i] += 1
            if domain_stamp[line] != d:
                domain_stamp[line] = d
                per_domain[d] += 1
                if first_domain[line] == -1:
                    first_domain[line] = d
                    n_all += 1
                elif first_domain[line] != d and multi[line] == 0:
                    multi[line] = 1
                    n_multi += 1
    return per_tile, per_domain, n_multi, n_all


@dataclass(frozen=True)
class FirstWave:
    """The programs of each L2 domain's first wave (the programs resident at once) and the lines they read: what
    reasons about an order are written from (all from the trace)."""

    waves: tuple[np.ndarray, ...]  # per domain with programs: its first wave's tiles, in launch order
    tile_lines: np.ndarray  # distinct lines of each tile of the waves, domain after domain
    domain_lines: np.ndarray  # distinct lines each domain's wave reads
    shared_lines: int  # lines read by the waves of more than one domain
    all_lines: int  # lines read by any wave


def first_wave(trace: Any, perm: np.ndarray, model: HardwareModel, occupancy: int) -> FirstWave:
    """The first wave of `perm` in every L2 domain of `model` (units x occupancy programs each) and its lines."""
    slots = model.units_per_domain * occupancy
    waves = [np.asarray(p[:slots], dtype=np.int64) for p in domain_programs(perm, model) if p.size]
    tiles = np.concatenate(waves)
    domain = np.repeat(np.arange(len(waves), dtype=np.int64), [w.size for w in waves])
    lines = np.ascontiguousarray(trace.lines, dtype=np.int64)
    low, high = line_range(trace.lines) if lines.size else (0, 0)
    per_tile, per_domain, n_multi, n_all = _wave_counts(
        lines - low if low else lines,
        np.ascontiguousarray(trace.step_ptr, dtype=np.int64),
        np.ascontiguousarray(trace.tile_step_ptr, dtype=np.int64),
        tiles, domain, len(waves), high - low + 1,
    )
    return FirstWave(tuple(waves), per_tile, per_domain, int(n_multi), int(n_all))


def _dense_lines(lines: np.ndarray) -> tuple[np.ndarray, int, int, np.ndarray | None]:
    """(dense ids, offset, span, sorted unique ids or None): dense id = line - offset, or the rank of the line
    among the unique ids when the ids spread too far for dense arrays."""
    lo, hi = int(lines.min()), int(lines.max())
    if hi - lo + 1 <= MAX_DENSE_LINES:
        return lines, lo, hi - lo + 1, None
    uniq, inverse = np.unique(lines, return_inverse=True)
    return inverse.astype(np.int64), 0, int(uniq.size), uniq


def _dense_range(base_line: int, n_lines: int, offset: int, span: int, uniq: np.ndarray | None) -> tuple[int, int]:
    """The dense-id range [lo, hi) of a tensor's lines."""
    if uniq is None:
        return max(base_line - offset, 0), min(base_line + n_lines - offset, span)
    return int(np.searchsorted(uniq, base_line)), int(np.searchsorted(uniq, base_line + n_lines))


def _tile_line_set(trace: Any, tile: int, lo: int, hi: int) -> np.ndarray:
    a0 = trace.step_ptr[trace.tile_step_ptr[tile]]
    a1 = trace.step_ptr[trace.tile_step_ptr[tile + 1]]
    lines = np.asarray(trace.lines[a0:a1])
    return np.unique(lines[(lines >= lo) & (lines < hi)])


def _pair_sharing(trace: Any, pairs: list[tuple[int, int]], lo: int, hi: int) -> tuple[float, int]:
    fractions = []
    for a, b in pairs:
        mine = _tile_line_set(trace, a, lo, hi)
        if mine.size == 0:
            continue
        theirs = _tile_line_set(trace, b, lo, hi)
        fractions.append(np.isin(mine, theirs, assume_unique=True).mean())
    return (float(np.mean(fractions)) if fractions else 0.0), len(fractions)


def _sharing_distances(trace: Any, lo: int, hi: int, tile_start: np.ndarray, n_lines: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Index distances between programs that share a sampled line in [lo, hi): for every sampled line, the
    gaps between consecutive programs of its sorted sharer list."""
    lines = np.asarray(trace.lines)
    in_range = np.flatnonzero((lines >= lo) & (lines < hi))
    if in_range.size == 0:
        return np.zeros(0, dtype=np.int64)
    picks = np.unique(lines[in_range[rng.integers(in_range.size, size=n_lines)]])
    hits = in_range[np.isin(lines[in_range], picks)]
    tiles = np.searchsorted(tile_start, hits, side="right") - 1
    pairs = np.unique(np.stack([lines[hits].astype(np.int64), tiles]), axis=1)
    same_line = pairs[0, 1:] == pairs[0, :-1]
    return (pairs[1, 1:] - pairs[1, :-1])[same_line]


def _period_of(distances: np.ndarray, n_tiles: int, min_fraction: float) -> tuple[int, float]:
    """The largest p > 1 such that at least `min_fraction` of the distances are multiples of p (1 when none).
    Candidates are the gcds of small groups of distances, so a few unrelated pairs do not hide the period."""
    rng = np.random.default_rng(0)
    candidates = {int(np.gcd.reduce(distances))}
    for _ in range(32):
        group = distances[rng.integers(distances.size, size=min(4, distances.size))]
        candidates.add(int(np.gcd.reduce(group)))
    for p in sorted(candidates, reverse=True):
        if 1 < p <= n_tiles // 2:
            fraction = float(np.mean(distances % p == 0))
            if fraction >= min_fraction:
                return p, fraction
    return 1, 0.0


def index_periods(trace: Any, seed: int = 0, n_lines: int = 2048, min_fraction: float = 0.9) -> tuple[Period, ...]:
    """Per tensor of a 1-D grid: the period with which programs sharing its lines repeat, when there is one
    (e.g. rows r and r + 64 gather the same x lines). Empty on 2-D grids, whose relations `sharing` reports."""
    grid = tuple(int(g) for g in trace.grid)
    if len(grid) != 1 or grid[0] < 4:
        return ()
    step_ptr = np.asarray(trace.step_ptr)
    tile_start = step_ptr[np.asarray(trace.tile_step_ptr)[:-1]]
    rng = np.random.default_rng(seed)
    out = []
    for info in list(getattr(trace, "tensors", []) or []):
        lo = int(info.base_line)
        distances = _sharing_distances(trace, lo, lo + int(info.n_lines), tile_start, n_lines, rng)
        if distances.size < 8:
            continue
        period, fraction = _period_of(distances, grid[0], min_fraction)
        if period > 1:
            out.append(Period(str(info.name), period, fraction, int(distances.size), float(np.median(distances))))
    return tuple(out)


def periods_by_traffic(trace: Any, seed: int = 0) -> tuple[Period, ...]:
    """index_periods, the tensor with the most requested sectors first: what the search's 1-D candidates need,
    without analyze()'s simulation of the identity order and footprint (25 s of spmv's 67 M-line trace on a CPU)."""
    periods = index_periods(trace, seed=seed)
    if len(periods) < 2:
        return periods
    lines, masks = np.asarray(trace.lines), np.asarray(trace.sector_mask)
    popcount = kernels.popcount_table()
    infos = {str(info.name): info for info in list(getattr(trace, "tensors", []) or [])}

    def requested(name: str) -> int:
        lo = int(infos[name].base_line)
        inside = (lines >= lo) & (lines < lo + int(infos[name].n_lines))
        return int(popcount[masks[inside]].sum())

    return tuple(sorted(periods, key=lambda p: -requested(p.tensor)))


def _partner_pairs(grid: tuple[int, ...], rng: np.random.Generator) -> dict[str, list[tuple[int, int]]]:
    """Sampled (program, partner) tile pairs for each relation of the grid's coordinates."""
    n_tiles = int(np.prod(grid))
    relations: dict[str, list[tuple[int, int]]] = {}
    if len(grid) == 2 and grid[0] * grid[1] > 1:
        gm, gn = grid
        same_m, same_n, neither = [], [], []
        for _ in range(N_SHARING_SAMPLES):
            pm, pn = int(rng.integers(gm)), int(rng.integers(gn))
            if gn > 1:
                other_n = (pn + 1 + int(rng.integers(gn - 1))) % gn
                same_m.append((pm * gn + pn, pm * gn + other_n))
            if gm > 1:
                other_m = (pm + 1 + int(rng.integers(gm - 1))) % gm
                same_n.append((pm * gn + pn, other_m * gn + pn))
            if gm > 1 and gn > 1:
                neither.append((pm * gn + pn, other_m * gn + other_n))
        relations = {"the same pid_m": same_m, "the same pid_n": same_n, "different pid_m and pid_n": neither}
    elif n_tiles > 1:
        nxt, far = [], []
        for _ in range(N_SHARING_SAMPLES):
            t = int(rng.integers(n_tiles - 1))
            nxt.append((t, t + 1))
            other = int(rng.integers(n_tiles))
            if abs(other - t) > 1:
                far.append((t, other))
        relations = {"neighbouring tile indices": nxt, "distant tile indices": far}
    return {k: v for k, v in relations.items() if v}


def analyze(
    trace: Any,
    hw: HardwareModel | str,
    perm: Any = None,
    occupancy: int = 1,
    order_label: str = "",
    seed: int = 0,
) -> Analysis:
    """Footprints, reuse and sharing of `trace`, and predicted hit rates of the identity order (and of `perm`)."""
    model = get_model(hw) if isinstance(hw, str) else hw
    try:
        lines = np.ascontiguousarray(trace.lines, dtype=np.int64)
        masks = np.ascontiguousarray(trace.sector_mask, dtype=np.uint8)
        step_ptr = np.ascontiguousarray(trace.step_ptr, dtype=np.int64)
        tile_step_ptr = np.ascontiguousarray(trace.tile_step_ptr, dtype=np.int64)
        grid = tuple(int(g) for g in trace.grid)
    except AttributeError as err:
        raise UserError(f"not an access trace ({err}): pass a swizzlelab.trace.AccessTrace") from None
    n_tiles = tile_step_ptr.size - 1
    if lines.size == 0:
        raise UserError("the access trace is empty: check the task sizes (no program touches memory)")
    sector_bytes = int(getattr(trace, "sector_bytes", model.sector_bytes))
    popcount = kernels.popcount_table()

    dense, offset, span, uniq = _dense_lines(lines)
    programs, union, requested, tile_requested, tile_unique = _line_pass(
        dense, masks, step_ptr, tile_step_ptr, np.int64(offset), np.int64(span), popcount
    )
    touched = programs > 0
    union_sectors = popcount[union]

    tensor_stats = []
    infos = list(getattr(trace, "tensors", []) or [])
    for info in infos:
        lo, hi = _dense_range(int(info.base_line), int(info.n_lines), offset, span, uniq)
        hi = max(hi, lo)
        progs = programs[lo:hi][touched[lo:hi]]
        t_bytes = int(union_sectors[lo:hi].sum()) * sector_bytes
        r_bytes = int(requested[lo:hi].sum()) * sector_bytes
        tensor_stats.append(
            TensorStats(
                name=str(info.name),
                touched_bytes=t_bytes,
                requested_bytes=r_bytes,
                lines_touched=int(progs.size),
                programs_per_line_mean=float(progs.mean()) if progs.size else 0.0,
                programs_per_line_max=int(progs.max()) if progs.size else 0,
            )
        )

    rng = np.random.default_rng(seed)
    sharing = []
    for relation, pairs in _partner_pairs(grid, rng).items():
        for info in infos:
            fraction, n_pairs = _pair_sharing(trace, pairs, int(info.base_line), int(info.base_line + info.n_lines))
            if n_pairs:
                sharing.append(Sharing(str(info.name), relation, fraction, n_pairs))

    periods = index_periods(trace, seed=seed)
    compulsory_sectors = int(union_sectors.sum())
    requested_sectors = int(requested.sum())
    footprint = footprint_of(trace)
    first_read_sectors = compulsory_read_sectors(footprint, model)
    identity = simulate(trace, np.arange(n_tiles, dtype=np.int64), model, occupancy=occupancy, footprint=footprint)
    current = None
    if perm is not None:
        current = simulate(trace, perm, model, occupancy=occupancy, footprint=footprint)
    progs_all = programs[touched]
    return Analysis(
        model=model.name,
        occupancy=int(occupancy),
        grid=grid,
        n_programs=n_tiles,
        line_accesses=int(lines.size),
        requested_bytes=requested_sectors * sector_bytes,
        compulsory_bytes=compulsory_sectors * sector_bytes,
        compulsory_read_bytes=first_read_sectors * sector_bytes,
        best_hit_rate=1.0 - first_read_sectors / requested_sectors if requested_sectors else 0.0,
        bytes_per_program_mean=float(tile_requested.mean()) * sector_bytes,
        bytes_per_program_max=int(tile_requested.max()) * sector_bytes,
        unique_bytes_per_program_mean=float(tile_unique.mean()) * sector_bytes,
        unique_bytes_per_program_max=int(tile_unique.max()) * sector_bytes,
        programs_per_line_mean=float(progs_all.mean()) if progs_all.size else 0.0,
        programs_per_line_max=int(progs_all.max()) if progs_all.size else 0,
        tensors=tuple(tensor_stats),
        sharing=tuple(sharing),
        identity=identity,
        current=current,
        current_label=order_label,
        statements=tuple(s.statement() for s in sharing) + tuple(p.statement() for p in periods),
        periods=periods,
    )
