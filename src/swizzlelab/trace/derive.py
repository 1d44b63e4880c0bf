"""Derive a kernel's whole access trace from a few of its tiles interpreted at the real size: each memory op's
lowest byte is fit as an affine function of the tile's coordinates, piecewise (the grid's last row and column
apart), checked on held-out tiles, and laid out for every tile with numpy and numba.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numba
import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo
from swizzlelab.trace.tracer import LINE_BYTES, SECTOR_BYTES, _Op, line_masks

MIN_CHECKS = 2  # a fitted piece counts only when at least this many interpreted tiles it did not use agree
BYTES_PER_ACCESS = 8 + 1 + 1  # lines int64, sector_mask uint8, is_write bool

OpKey = tuple[int, int, bool, int]  # (step, tensor index, is_write, lane pattern id)


class NotDerivable(Exception):
    """The kernel's accesses are not affine in its tile coordinates, or could not be checked; says why."""


@dataclass(frozen=True)
class TileOps:
    """One interpreted tile: the structure of its non-empty ops and each op's lowest byte in its tensor."""

    key: tuple[OpKey, ...]
    lo: np.ndarray  # int64[n_ops]


def tile_ops(steps: list[list[_Op]]) -> TileOps:
    """The tile's ops recorded with `record_accesses(describe=True)`, empty steps dropped as to_trace does."""
    key: list[OpKey] = []
    lo: list[int] = []
    step_no = 0
    for step in steps:
        ops = [op for op in step if op.pattern is not None]
        if not ops:
            continue
        for op in ops:
            if op.pattern < 0:
                raise NotDerivable("a memory op's lanes lie in more than one tensor argument")
            key.append((step_no, op.tensor, op.is_write, op.pattern))
            lo.append(op.lo)
        step_no += 1
    return TileOps(tuple(key), np.array(lo, dtype=np.int64))


# ---- pieces of the tile grid -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Box:
    """Tiles with lo[d] <= coordinate d < hi[d]: the grid's body, or its last row / column / corner, where
    masks cut blocks short and the accesses follow another affine law."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod([h - lo for lo, h in zip(self.lo, self.hi)]))

    def varying(self) -> list[int]:
        return [d for d, (lo, h) in enumerate(zip(self.lo, self.hi)) if h - lo >= 2]

    def coords(self) -> np.ndarray:
        """int64[size, D]: every tile's coordinates, row-major."""
        axes = [np.arange(lo, h, dtype=np.int64) for lo, h in zip(self.lo, self.hi)]
        return np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)

    def corners(self) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(itertools.product(*[(lo, h - 1) for lo, h in zip(self.lo, self.hi)])))

    def holds(self, coord: tuple[int, ...]) -> bool:
        return all(lo <= c < h for c, lo, h in zip(coord, self.lo, self.hi))


def grid_boxes(grid: tuple[int, ...]) -> list[Box]:
    """The body (every coordinate but its last) first, then the last row, column and corner pieces."""
    per_dim = [[(0, g - 1), (g - 1, g)] if g >= 2 else [(0, 1)] for g in grid]
    return [Box(tuple(lo for lo, _ in parts), tuple(h for _, h in parts)) for parts in itertools.product(*per_dim)]


def plan_tiles(grid: tuple[int, ...], *, n_random: int = 4, seed: int = 0) -> list[int]:
    """Tiles to interpret (row-major ids), the body's fit points first: p and p + e_d at its centre, then
    every piece's corners and a few random tiles (n_random in the body, half that elsewhere); a piece
    hardly larger than that is taken whole."""
    rng = np.random.default_rng(seed)
    chosen: dict[tuple[int, ...], None] = {}
    for index, box in enumerate(grid_boxes(grid)):
        want: list[tuple[int, ...]] = []
        if index == 0:
            want += _fit_points(box)
        want += box.corners()
        k = n_random if index == 0 else max(1, n_random // 2)
        if box.size <= len(set(want)) + k + 2:
            want = [tuple(int(c) for c in row) for row in box.coords()]
        else:
            taken = set(want)
            target = len(taken) + k
            coords = box.coords()
            for row in coords[rng.permutation(len(coords))]:
                if len(taken) >= target:
                    break
                coord = tuple(int(c) for c in row)
                if coord not in taken:
                    taken.add(coord)
                    want.append(coord)
        chosen.update(dict.fromkeys(want))
    return [int(np.ravel_multi_index(c, grid)) for c in chosen]


def _fit_points(box: Box) -> list[tuple[int, ...]]:
    centre = tuple((lo + h - 1) // 2 for lo, h in zip(box.lo, box.hi))
    points = [centre]
    for d in box.varying():
        points.append(tuple(c + (1 if i == d else 0) for i, c in enumerate(centre)))
    return points


def plan_programs(grid: tuple[int, ...], program_of_tile: np.ndarray,
                  tiles_of_program: list[np.ndarray] | None = None, *, n_random: int = 4, seed: int = 0) -> list[int]:
    """Programs to interpret so that their tiles include plan_tiles' choice: the programs of those tiles when
    each program runs one tile (`tiles_of_program` None); for persistent programs (several tiles each, all
    interpreted) the programs of the first and last tile, then greedily those adding most tiles to pieces
    that still lack samples."""
    wanted = plan_tiles(grid, n_random=n_random, seed=seed)
    if tiles_of_program is None:
        return list(dict.fromkeys(int(program_of_tile[t]) for t in wanted if program_of_tile[t] >= 0))
    program_of = program_of_tile
    boxes = grid_boxes(grid)
    box_of = _box_index(grid, boxes)
    need = np.bincount(box_of[np.asarray(wanted, dtype=np.int64)], minlength=len(boxes))
    chosen: list[int] = []
    have = np.zeros(len(boxes), dtype=np.int64)

    def take(program: int) -> None:
        chosen.append(program)
        np.add.at(have, box_of[np.asarray(tiles_of_program[program], dtype=np.int64)], 1)

    for tile in (0, int(np.prod(grid)) - 1):
        if program_of[tile] >= 0 and int(program_of[tile]) not in chosen:
            take(int(program_of[tile]))
    while np.any(have < need):
        lacking = np.maximum(need - have, 0)
        best, gain = -1, 0
        for program, tiles in enumerate(tiles_of_program):
            if program in chosen or not len(tiles):
                continue
            counts = np.bincount(box_of[np.asarray(tiles, dtype=np.int64)], minlength=len(boxes))
            value = int(np.minimum(counts, lacking).sum())
            if value > gain:
                best, gain = program, value
        if best < 0:
            break
        take(best)
    return chosen


def _box_index(grid: tuple[int, ...], boxes: list[Box]) -> np.ndarray:
    """Index into `boxes` of every tile (row-major)."""
    out = np.empty(int(np.prod(grid)), dtype=np.int64)
    for index, box in enumerate(boxes):
        out[np.ravel_multi_index(box.coords().T, grid)] = index
    return out


# ---- fitting -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    """Each op's lowest byte as c0 + coords @ coef over the tiles of one piece with one op structure."""

    key: tuple[OpKey, ...]
    c0: np.ndarray  # int64[n_ops]
    coef: np.ndarray  # int64[D, n_ops]
    fit_tiles: tuple[int, ...]

    def predict(self, coords: np.ndarray) -> np.ndarray:
        return self.c0[None, :] + coords @ self.coef


def _fit(box: Box, samples: list[tuple[int, tuple[int, ...], TileOps]], n_dims: int) -> Model | None:
    """The model through the first affinely independent samples (in order) of the box; None when too few."""
    varying = box.varying()
    if not samples:
        return None
    key = samples[0][2].key
    rows: list[np.ndarray] = []
    picked: list[tuple[int, tuple[int, ...], TileOps]] = []
    for sample in samples:
        if sample[2].key != key:
            continue
        row = np.array([1, *(sample[1][d] for d in varying)], dtype=np.float64)
        if np.linalg.matrix_rank(np.array(rows + [row])) > len(rows):
            rows.append(row)
            picked.append(sample)
        if len(rows) == len(varying) + 1:
            break
    if len(rows) < len(varying) + 1:
        return None
    y = np.stack([s[2].lo for s in picked]).astype(np.int64)
    solution = np.rint(np.linalg.solve(np.array(rows), y.astype(np.float64))).astype(np.int64)
    coef = np.zeros((n_dims, len(key)), dtype=np.int64)
    coef[varying] = solution[1:]
    a = np.array(rows, dtype=np.int64)
    if not np.array_equal(a @ solution, y):  # integer law through the fit points, or none
        return None
    # coordinates that do not vary in the box have zero coefficients: the intercept holds their share
    return Model(key, solution[0], coef, tuple(s[0] for s in picked))


def _mismatch(model: Model, coord: tuple[int, ...], ops: TileOps, tensors: list[TensorInfo]) -> str | None:
    """Why the interpreted tile at `coord` disagrees with the model (None when it agrees byte for byte)."""
    where = "tile (" + ", ".join(map(str, coord)) + ")"
    if ops.key != model.key:
        if len(ops.key) != len(model.key):
            return f"{where} ran {len(ops.key)} memory ops where the fit expects {len(model.key)}"
        diff = next(i for i, (a, b) in enumerate(zip(ops.key, model.key)) if a != b)
        step, tensor, _, _ = ops.key[diff]
        return (f"{where}: op {diff} (step {step}, {tensors[tensor].name}) touches another lane pattern than "
                "the fit's tiles (its addresses depend on data, or on the tile otherwise than affinely)")
    predicted = model.predict(np.array([coord], dtype=np.int64))[0]
    bad = np.flatnonzero(predicted != ops.lo)
    if bad.size:
        i = int(bad[0])
        step, tensor, _, _ = ops.key[i]
        return (f"{where}: op {i} (step {step}, {tensors[tensor].name}) starts at byte {int(ops.lo[i])}, the "
                f"affine fit says {int(predicted[i])}")
    return None


@dataclass
class _Class:
    """Tiles laid out alike: one op structure, each tile's lowest bytes."""

    key: tuple[OpKey, ...]
    tiles: np.ndarray  # int64[n]
    lo: np.ndarray  # int64[n, n_ops]


@dataclass(frozen=True)
class Derivation:
    """A derived trace and what it rests on (counts of interpreted tiles)."""

    trace: AccessTrace
    fit_tiles: int  # interpreted tiles the fits went through
    checked_tiles: int  # interpreted tiles not used by any fit that agreed with it
    exact_tiles: int  # tiles of pieces interpreted whole, taken as they ran
    pieces: int  # fitted pieces


def derive_trace(samples: dict[int, TileOps], grid: tuple[int, ...], tensors: list[TensorInfo],
                 patterns: list[tuple[int, np.ndarray]], meta: dict[str, str] | None = None,
                 integer_atomics: tuple[str, ...] = ()) -> Derivation:
    """The whole trace on `grid` from interpreted tiles `samples` (row-major tile -> ops; fit points first in
    insertion order). Raises NotDerivable with the reason when a piece's fit fails or cannot be checked."""
    if integer_atomics:
        raise NotDerivable(f"atomics on integer tensor {', '.join(integer_atomics)}: programs may hand each other "
                           "work, so skipping some changes what the others do")
    grid = tuple(int(g) for g in grid)
    n_dims = len(grid)
    boxes = grid_boxes(grid)
    by_box: list[list[tuple[int, tuple[int, ...], TileOps]]] = [[] for _ in boxes]
    for tile, ops in samples.items():
        coord = tuple(int(c) for c in np.unravel_index(tile, grid))
        by_box[next(i for i, b in enumerate(boxes) if b.holds(coord))].append((tile, coord, ops))
    classes: list[_Class] = []
    fit_tiles: set[int] = set()
    checked: set[int] = set()
    exact = 0
    pieces = 0
    main: Model | None = None
    for index, (box, own) in enumerate(zip(boxes, by_box)):
        if len(own) == box.size:  # interpreted whole: taken as it ran
            for tile, _, ops in own:
                classes.append(_Class(ops.key, np.array([tile], np.int64), ops.lo[None, :]))
            exact += box.size
            continue
        model = None
        if index > 0 and main is not None and len(own) >= min(MIN_CHECKS, box.size) and all(
                _mismatch(main, c, ops, tensors) is None for _, c, ops in own):
            model = main  # the body's law holds in this piece too
            checked.update(t for t, _, _ in own)
        else:
            model = _fit(box, own, n_dims)
            if model is None:
                raise NotDerivable(
                    f"too few interpreted tiles with one op structure in the grid's piece {_box_text(box)} to fit "
                    "an affine law (the tiles' memory ops differ in number or lane pattern)")
            held = [(t, c, ops) for t, c, ops in own if t not in model.fit_tiles]
            if len(held) < min(MIN_CHECKS, box.size - len(model.fit_tiles)):
                raise NotDerivable(f"only {len(held)} held-out tiles to check the fit in piece {_box_text(box)}")
            for _, coord, ops in held:
                reason = _mismatch(model, coord, ops, tensors)
                if reason is not None:
                    raise NotDerivable(reason)
            fit_tiles.update(model.fit_tiles)
            checked.update(t for t, _, _ in held)
            pieces += 1
        if index == 0:
            main = model
        coords = box.coords()
        classes.append(_Class(model.key, np.ravel_multi_index(coords.T, grid).astype(np.int64), model.predict(coords)))
    trace = _layout(classes, grid, tensors, patterns, meta or {})
    return Derivation(trace, len(fit_tiles), len(checked), exact, pieces)


def _box_text(box: Box) -> str:
    return " x ".join(f"{lo}" if h - lo == 1 else f"{lo}..{h - 1}" for lo, h in zip(box.lo, box.hi))


# ---- laying the trace out ----------------------------------------------------------------------------
def _template(elem_bytes: int, rel: np.ndarray, residue: int) -> tuple[np.ndarray, np.ndarray]:
    """Lines (relative to the op's lowest byte's line) and sector masks of a lane pattern at a line offset."""
    offsets = rel + residue
    return line_masks(offsets // LINE_BYTES, offsets % LINE_BYTES, elem_bytes)


def _layout(classes: list[_Class], grid: tuple[int, ...], tensors: list[TensorInfo],
            patterns: list[tuple[int, np.ndarray]], meta: dict[str, str]) -> AccessTrace:
    n_tiles = int(np.prod(grid))
    base_line = np.array([t.base_line for t in tensors], dtype=np.int64)
    # templates: one per (lane pattern, lowest byte's offset in its line) that occurs
    per_class = []
    for cls in classes:
        pattern = np.array([k[3] for k in cls.key], dtype=np.int64)
        per_class.append(pattern[None, :] * LINE_BYTES + cls.lo % LINE_BYTES)
    all_keys = np.unique(np.concatenate([k.ravel() for k in per_class])) if classes else np.zeros(0, np.int64)
    pool_lines: list[np.ndarray] = []
    pool_masks: list[np.ndarray] = []
    for key in all_keys:
        elem_bytes, rel = patterns[int(key) // LINE_BYTES]
        lines, masks = _template(elem_bytes, rel, int(key) % LINE_BYTES)
        pool_lines.append(lines)
        pool_masks.append(masks)
    tmpl_len = np.array([a.size for a in pool_lines], dtype=np.int64)
    tmpl_last = np.array([a[-1] if a.size else 0 for a in pool_lines], dtype=np.int64)
    n_lines = np.array([t.n_lines for t in tensors], dtype=np.int64)
    tmpl_ptr = np.zeros(tmpl_len.size + 1, dtype=np.int64)
    np.cumsum(tmpl_len, out=tmpl_ptr[1:])
    # per tile: segments (ops) and steps, in tile order
    tile_segs = np.zeros(n_tiles, dtype=np.int64)
    tile_steps = np.zeros(n_tiles, dtype=np.int64)
    for cls in classes:
        tile_segs[cls.tiles] = len(cls.key)
        tile_steps[cls.tiles] = (cls.key[-1][0] + 1) if cls.key else 0
    seg_ptr = np.zeros(n_tiles + 1, dtype=np.int64)
    np.cumsum(tile_segs, out=seg_ptr[1:])
    tile_step_ptr = np.zeros(n_tiles + 1, dtype=np.int64)
    np.cumsum(tile_steps, out=tile_step_ptr[1:])
    n_segs = int(seg_ptr[-1])
    seg_tid = np.zeros(n_segs, dtype=np.int64)
    seg_shift = np.zeros(n_segs, dtype=np.int64)
    seg_write = np.zeros(n_segs, dtype=np.bool_)
    step_sizes = np.zeros(int(tile_step_ptr[-1]), dtype=np.int64)
    for cls, keys in zip(classes, per_class):
        if not cls.key:
            continue
        at = seg_ptr[cls.tiles][:, None] + np.arange(len(cls.key))[None, :]
        tid = np.searchsorted(all_keys, keys)
        seg_tid[at] = tid
        tensor = np.array([k[1] for k in cls.key], dtype=np.int64)
        _refuse_outside(cls, tmpl_last[tid], n_lines[tensor], tensors, tensor, grid)
        seg_shift[at] = base_line[tensor][None, :] + cls.lo // LINE_BYTES
        seg_write[at] = np.array([k[2] for k in cls.key], dtype=np.bool_)[None, :]
        step = np.array([k[0] for k in cls.key], dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
        per_step = np.add.reduceat(tmpl_len[tid], starts, axis=1)
        step_sizes[tile_step_ptr[cls.tiles][:, None] + np.arange(starts.size)[None, :]] = per_step
    seg_len = tmpl_len[seg_tid]
    total = int(seg_len.sum())
    need = total * BYTES_PER_ACCESS
    available = available_memory_bytes()
    if need > available // 2:
        raise UserError(
            f"the trace holds {total:,} line accesses ({fmt_bytes(need)}) and this machine has "
            f"{fmt_bytes(available)} available: trace a smaller size or larger blocks")
    seg_start = np.zeros(n_segs, dtype=np.int64)
    np.cumsum(seg_len[:-1], out=seg_start[1:])
    lines = np.empty(total, dtype=np.int64)
    masks = np.empty(total, dtype=np.uint8)
    writes = np.empty(total, dtype=np.bool_)
    pool_l = np.concatenate(pool_lines) if pool_lines else np.zeros(0, np.int64)
    pool_m = np.concatenate(pool_masks) if pool_masks else np.zeros(0, np.uint8)
    _fill(seg_start, seg_tid, seg_shift, seg_write, tmpl_ptr, pool_l, pool_m, lines, masks, writes)
    step_ptr = np.zeros(step_sizes.size + 1, dtype=np.int64)
    np.cumsum(step_sizes, out=step_ptr[1:])
    return AccessTrace(lines, masks, writes, step_ptr, tile_step_ptr, list(tensors), grid, LINE_BYTES,
                       SECTOR_BYTES, dict(meta)).validate()


def _refuse_outside(cls: _Class, last_line: np.ndarray, n_lines: np.ndarray, tensors: list[TensorInfo],
                    tensor: np.ndarray, grid: tuple[int, ...]) -> None:
    """NotDerivable when the law puts an op of a tile nobody interpreted outside its tensor."""
    bad = (cls.lo < 0) | (cls.lo // LINE_BYTES + last_line >= n_lines[None, :])
    if bad.any():
        row, op = (int(i) for i in np.argwhere(bad)[0])
        coord = ", ".join(str(int(c)) for c in np.unravel_index(int(cls.tiles[row]), grid))
        raise NotDerivable(f"the affine fit puts op {op} of tile ({coord}) outside {tensors[int(tensor[op])].name}: "
                           "that part of the grid follows another law")


@numba.njit(cache=True, nogil=True)
def _fill(seg_start, seg_tid, seg_shift, seg_write, tmpl_ptr, pool_lines, pool_masks,
          out_lines, out_masks, out_writes):  # pragma: no cover - numba
    for s in range(seg_start.size):
        pos = seg_start[s]
        first = tmpl_ptr[seg_tid[s]]
        count = tmpl_ptr[seg_tid[s] + 1] - first
        shift = seg_shift[s]
        write = seg_write[s]
        for q in range(count):
            out_lines[pos + q] = pool_lines[first + q] + shift
            out_masks[pos + q] = pool_masks[first + q]
            out_writes[pos + q] = write


def estimate_accesses(samples: dict[int, TileOps], patterns: list[tuple[int, np.ndarray]], n_tiles: int) -> int:
    """Line accesses a full trace of `n_tiles` tiles would hold, from the mean of the interpreted ones."""
    if not samples:
        return 0
    counts = []
    for ops in samples.values():
        total = 0
        for (_, _, _, pattern), lo in zip(ops.key, ops.lo):
            elem_bytes, rel = patterns[pattern]
            total += _template(elem_bytes, rel, int(lo) % LINE_BYTES)[0].size
        counts.append(total)
    return int(np.mean(counts) * n_tiles)
