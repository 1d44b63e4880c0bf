"""Prove a formula is a bijection on a concrete grid, and name the permutation it produces.

A Proof counts tiles never run, tiles run more than once and out-of-range outputs, with examples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod

import numpy as np

from swizzlelab.errors import FormulaError, NotABijectionError
from swizzlelab.swizzle.evaluate import evaluate, fmt_grid
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


def prove(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
) -> Proof:
    """Evaluate `formula` on every program of `grid` and count its defects (never raises on defects)."""
    grid = tuple(int(g) for g in grid)
    proof, _ = prove_outputs(evaluate(formula, grid, args, consts), formula, grid)
    return proof


def permutation_id(grid: tuple[int, ...], perm: np.ndarray) -> str:
    """Canonical 16-hex id of an order: equal ids <=> same grid and same tile for every launch index."""
    digest = hashlib.sha256()
    digest.update(("swz1|" + "x".join(str(int(g)) for g in grid) + "|").encode())
    digest.update(np.ascontiguousarray(perm, dtype="<i8").tobytes())
    return digest.hexdigest()[:16]


def to_permutation(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
) -> Permutation:
    """The proven permutation of `formula` on `grid`; raises NotABijectionError with the defect counts."""
    grid = tuple(int(g) for g in grid)
    proof, tiles = prove_outputs(evaluate(formula, grid, args, consts), formula, grid)
    if not proof.is_bijection:
        raise NotABijectionError(proof.message())
    return Permutation(grid=grid, perm=tiles, id=permutation_id(grid, tiles), formula=formula)
