"""Prove a formula is a bijection on a concrete grid, and name the permutation it produces.

A Proof counts tiles never run, tiles run more than once and out-of-range outputs, with examples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import prod

import numpy as np

from swizzlelab.errors import FormulaError, NotABijectionError
from swizzlelab.swizzle.evaluate import check_launch, chunk_bytes, evaluate_chunks, fmt_grid, require_memory
from swizzlelab.swizzle.lang import Formula

N_EXAMPLES = 5


@dataclass(frozen=True)
class Proof:
    """The outcome of checking one formula on one grid."""

    grid: tuple[int, ...]
    n_programs: int
    n_tiles: int
    n_missing: int
    n_duplicated: int
    n_out_of_range: int
    missing_examples: tuple[str, ...] = field(default=())
    duplicate_examples: tuple[str, ...] = field(default=())
    out_of_range_examples: tuple[str, ...] = field(default=())

    @property
    def is_bijection(self) -> bool:
        return self.n_missing == 0 and self.n_duplicated == 0 and self.n_out_of_range == 0

    def message(self) -> str:
        """One line: 'bijection on 64x64 (4096 tiles)' or the defect counts with first examples."""
        if self.is_bijection:
            return f"bijection on grid {fmt_grid(self.grid)}: every one of {self.n_tiles} tiles runs exactly once"
        parts = [f"not a bijection on grid {fmt_grid(self.grid)} ({self.n_tiles} tiles)"]
        if self.n_missing:
            parts.append(f"{self.n_missing} tiles never run (e.g. {', '.join(self.missing_examples)})")
        if self.n_duplicated:
            parts.append(f"{self.n_duplicated} tiles run more than once (e.g. {'; '.join(self.duplicate_examples)})")
        if self.n_out_of_range:
            parts.append(
                f"{self.n_out_of_range} programs map outside the grid (e.g. {', '.join(self.out_of_range_examples)})"
            )
        return ": ".join(parts[:1]) + ": " + "; ".join(parts[1:])

    def to_dict(self) -> dict[str, object]:
        return {
            "grid": list(self.grid),
            "is_bijection": self.is_bijection,
            "n_programs": self.n_programs,
            "n_tiles": self.n_tiles,
            "n_missing": self.n_missing,
            "n_duplicated": self.n_duplicated,
            "n_out_of_range": self.n_out_of_range,
            "missing_examples": list(self.missing_examples),
            "duplicate_examples": list(self.duplicate_examples),
            "out_of_range_examples": list(self.out_of_range_examples),
        }


@dataclass(frozen=True)
class Permutation:
    """A proven order: perm[launch_index] = row-major tile index, with its canonical id."""

    grid: tuple[int, ...]
    perm: np.ndarray
    id: str
    formula: Formula | None = None

    def tiles_2d(self) -> tuple[np.ndarray, np.ndarray]:
        """(pid_m, pid_n) per launch index, for 2-D grids."""
        n_cols = self.grid[-1] if len(self.grid) == 2 else 1
        return self.perm // n_cols, self.perm % n_cols


def _tile_name(tile: int, grid: tuple[int, ...]) -> str:
    if len(grid) == 2:
        return f"tile ({tile // grid[1]}, {tile % grid[1]})"
    return f"tile {tile}"


def tile_indices(
    outputs: dict[str, np.ndarray], formula: Formula, grid: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Row-major tile index per program and a mask of programs whose outputs fall inside the grid."""
    names = formula.outputs
    if len(names) == 2:
        if len(grid) != 2:
            raise FormulaError(
                f"formula yields {names[0]}, {names[1]} but the grid {fmt_grid(grid)} is 1-D: give a 2-D grid"
            )
        rows, cols = outputs[names[0]], outputs[names[1]]
        in_range = (rows >= 0) & (rows < grid[0]) & (cols >= 0) & (cols < grid[1])
        return rows * grid[1] + cols, in_range
    if len(names) == 1:
        linear = outputs[names[0]]
        return linear, (linear >= 0) & (linear < prod(grid))
    raise FormulaError(f"formula yields {len(names)} outputs; a swizzle yields pid, or pid_m and pid_n")


def _examples(values: np.ndarray, describe) -> tuple[str, ...]:
    return tuple(describe(int(v)) for v in values[:N_EXAMPLES])


def prove_outputs(outputs: dict[str, np.ndarray], formula: Formula, grid: tuple[int, ...]) -> tuple[Proof, np.ndarray]:
    """The Proof and the per-program tile index, from already evaluated outputs."""
    tiles, in_range = tile_indices(outputs, formula, grid)
    n_tiles = prod(grid)
    counts = np.bincount(tiles[in_range], minlength=n_tiles)
    missing = np.flatnonzero(counts == 0)
    duplicated = np.flatnonzero(counts > 1)
    out_of_range = np.flatnonzero(~in_range)

    def describe_duplicate(tile: int) -> str:
        programs = np.flatnonzero(in_range & (tiles == tile))[:3]
        return f"{_tile_name(tile, grid)} by programs {', '.join(str(p) for p in programs)}"

    def describe_outside(program: int) -> str:
        values = ", ".join(f"{name}={int(outputs[name][program])}" for name in formula.outputs)
        return f"program {program} -> {values}"

    proof = Proof(
        grid=grid,
        n_programs=int(tiles.size),
        n_tiles=n_tiles,
        n_missing=int(missing.size),
        n_duplicated=int(duplicated.size),
        n_out_of_range=int(out_of_range.size),
        missing_examples=_examples(missing, lambda t: _tile_name(t, grid)),
        duplicate_examples=_examples(duplicated, describe_duplicate),
        out_of_range_examples=_examples(out_of_range, describe_outside),
    )
    return proof, tiles


def permutation_id(grid: tuple[int, ...], perm: np.ndarray) -> str:
    """Canonical 16-hex id of an order: equal ids <=> same grid and same tile for every launch index."""
    digest = hashlib.sha256()
    digest.update(("swz1|" + "x".join(str(int(g)) for g in grid) + "|").encode())
    digest.update(np.ascontiguousarray(perm, dtype="<i8").tobytes())
    return digest.hexdigest()[:16]


SCAN_BLOCK = 1 << 22


@dataclass(frozen=True)
class CheckResult:
    """A streamed check of one formula on one grid: the proof, the permutation id when it is a bijection, the
    permutation itself when asked for, and notes (e.g. a num_pid_m taken from the grid)."""

    proof: Proof
    permutation_id: str | None
    perm: np.ndarray | None = None
    notes: tuple[str, ...] = field(default=())


def _accumulate(counts: np.ndarray, scratch: np.ndarray, tiles: np.ndarray) -> None:
    """counts[t] += occurrences of t in `tiles`, saturating at 2 (all a proof needs); `scratch` is a byte per
    tile whose contents do not matter."""
    if tiles.size == 0:
        return
    lo, hi = int(tiles.min()), int(tiles.max())
    span = hi - lo + 1
    if span <= 4 * tiles.size + 1024:
        # A chunk of consecutive programs often covers a compact run of tiles: count densely.
        seen = np.bincount(tiles - lo, minlength=span)
        counts[lo : hi + 1] = np.minimum(counts[lo : hi + 1] + seen, 2)
        return
    # Scattered tiles: find tiles hit twice inside the chunk without sorting. Each program writes one byte of
    # its chunk-local index into scratch[tile] and reads it back; a program that reads another's byte shares
    # its tile. Two programs of one tile read back the same bytes in all three passes only if their indices
    # agree in the low 24 bits, impossible within a chunk of at most 2**24 programs.
    assert tiles.size <= 1 << 24
    local = np.arange(tiles.size, dtype=np.int64)
    shared = np.zeros(tiles.size, dtype=bool)
    for shift in (0, 8, 16):
        tag = ((local >> shift) & 0xFF).astype(np.uint8)
        scratch[tiles] = tag
        shared |= scratch[tiles] != tag
    counts[tiles] = np.minimum(counts[tiles] + 1, 2)
    if shared.any():
        counts[tiles[shared]] = 2


def _scan(counts: np.ndarray, predicate) -> tuple[int, list[int]]:
    """How many tiles satisfy `predicate(counts)`, and the first N_EXAMPLES of them, block by block."""
    total, first = 0, []
    for lo in range(0, counts.size, SCAN_BLOCK):
        hits = predicate(counts[lo : lo + SCAN_BLOCK])
        n_hits = int(np.count_nonzero(hits))
        total += n_hits
        if n_hits and len(first) < N_EXAMPLES:
            first.extend(int(lo + i) for i in np.flatnonzero(hits)[: N_EXAMPLES - len(first)])
    return total, first


def check_order(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
    *,
    keep_perm: bool = False,
    progress: Callable[[int, int], None] | None = None,
    chunk: int | None = None,
) -> CheckResult:
    """Prove `formula` on `grid` chunk by chunk, exactly as `prove`, with two bytes per tile.

    The permutation id is hashed as the chunks pass (the same id as `permutation_id` of the whole order);
    `keep_perm` also keeps the order (8 bytes per program). Work that would not fit in the memory available
    is refused before it starts, naming the bytes. `progress(done, total)` is called after every chunk."""
    grid = tuple(int(g) for g in grid)
    launch = check_launch(formula, grid)
    tile_indices({name: np.zeros(0, dtype=np.int64) for name in formula.outputs}, formula, grid)
    n_programs, n_tiles = prod(launch), prod(grid)
    needed = 2 * n_tiles + chunk_bytes(formula) + (8 * n_programs if keep_perm else 0)
    require_memory(needed, f"proving the formula on grid {fmt_grid(grid)} ({n_tiles:,} tiles)")
    counts = np.zeros(n_tiles, dtype=np.uint8)
    scratch = np.zeros(n_tiles, dtype=np.uint8)
    perm = np.empty(n_programs, dtype=np.int64) if keep_perm else None
    digest = hashlib.sha256()
    digest.update(("swz1|" + "x".join(str(g) for g in grid) + "|").encode())
    n_out_of_range, outside_examples = 0, []
    notes: list[str] = []
    for start, outputs in evaluate_chunks(formula, grid, args, consts, chunk, notes):
        tiles, in_range = tile_indices(outputs, formula, grid)
        tiles = np.ascontiguousarray(tiles, dtype="<i8")
        digest.update(tiles.tobytes())
        if perm is not None:
            perm[start : start + tiles.size] = tiles
        outside = np.flatnonzero(~in_range)
        n_out_of_range += int(outside.size)
        for local in outside[: max(0, N_EXAMPLES - len(outside_examples))]:
            values = ", ".join(f"{name}={int(outputs[name][local])}" for name in formula.outputs)
            outside_examples.append(f"program {start + int(local)} -> {values}")
        _accumulate(counts, scratch, tiles[in_range])
        if progress is not None:
            progress(start + tiles.size, n_programs)
    n_missing, missing = _scan(counts, lambda c: c == 0)
    n_duplicated, duplicated = _scan(counts, lambda c: c > 1)
    del counts, scratch
    duplicate_examples = _duplicate_examples(formula, grid, args, consts, chunk, duplicated)
    proof = Proof(
        grid=grid,
        n_programs=n_programs,
        n_tiles=n_tiles,
        n_missing=n_missing,
        n_duplicated=n_duplicated,
        n_out_of_range=n_out_of_range,
        missing_examples=tuple(_tile_name(t, grid) for t in missing),
        duplicate_examples=duplicate_examples,
        out_of_range_examples=tuple(outside_examples),
    )
    return CheckResult(
        proof=proof,
        permutation_id=digest.hexdigest()[:16] if proof.is_bijection else None,
        perm=perm,
        notes=tuple(notes),
    )


def _duplicate_examples(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None,
    consts: Mapping[str, int] | None,
    chunk: int | None,
    duplicated: list[int],
) -> tuple[str, ...]:
    """'tile (r, c) by programs a, b, c' for the first duplicated tiles: a second pass finds the programs."""
    if not duplicated:
        return ()
    targets = np.asarray(duplicated, dtype=np.int64)
    programs: dict[int, list[int]] = {t: [] for t in duplicated}
    for start, outputs in evaluate_chunks(formula, grid, args, consts, chunk):
        tiles, in_range = tile_indices(outputs, formula, grid)
        for local in np.flatnonzero(in_range & np.isin(tiles, targets)):
            found = programs[int(tiles[local])]
            if len(found) < 3:
                found.append(start + int(local))
        if all(len(found) == 3 for found in programs.values()):
            break
    return tuple(
        f"{_tile_name(t, grid)} by programs {', '.join(str(p) for p in programs[t])}" for t in duplicated
    )


def prove(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
) -> Proof:
    """Evaluate `formula` on every program of `grid` and count its defects (never raises on defects)."""
    return check_order(formula, grid, args, consts).proof


def to_permutation(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
) -> Permutation:
    """The proven permutation of `formula` on `grid`; raises NotABijectionError with the defect counts."""
    grid = tuple(int(g) for g in grid)
    result = check_order(formula, grid, args, consts, keep_perm=True)
    if not result.proof.is_bijection:
        raise NotABijectionError(result.proof.message())
    assert result.perm is not None and result.permutation_id is not None
    return Permutation(grid=grid, perm=result.perm, id=result.permutation_id, formula=formula)
