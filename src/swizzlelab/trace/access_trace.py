"""AccessTrace: per-tile, per-step memory accesses at 128-byte-line granularity with 32-byte sector masks.

CSR layout (tiles -> steps -> accesses) so that the simulator can replay any launch order; stored as .npz.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.io import atomic_write_bytes

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's place in the trace's line address space: lines base_line .. base_line + n_lines - 1."""

    name: str
    base_line: int
    n_lines: int
    elem_bytes: int

    @property
    def end_line(self) -> int:
        return self.base_line + self.n_lines


@dataclass
class AccessTrace:
    """Ordered line accesses of every tile of a kernel, grouped by tile and loop step (see ARCHITECTURE.md)."""

    lines: np.ndarray  # int64[n_access]
    sector_mask: np.ndarray  # uint8[n_access], bit k = sector k of the line touched
    is_write: np.ndarray  # bool[n_access]
    step_ptr: np.ndarray  # int64[n_steps + 1]
    tile_step_ptr: np.ndarray  # int64[n_tiles + 1]
    tensors: list[TensorInfo]
    grid: tuple[int, ...]
    line_bytes: int = 128
    sector_bytes: int = 32
    meta: dict[str, str] = field(default_factory=dict)  # provenance: source ("model"/"traced"), kernel, sizes
    # The kernel runs near the L2's bandwidth (its task.yml says l2_bound: true), so each program's pace is its SM's
    # share of its GPC's path to L2; the simulator's saturating progress model gives such traces SM pace.
    l2_bound: bool = False

    # ---- sizes -------------------------------------------------------------------------------------------
    @property
    def n_tiles(self) -> int:
        return int(self.tile_step_ptr.size - 1)

    @property
    def n_steps(self) -> int:
        return int(self.step_ptr.size - 1)

    @property
    def n_accesses(self) -> int:
        return int(self.lines.size)

    @property
    def sectors_per_line(self) -> int:
        return self.line_bytes // self.sector_bytes

    # ---- cheap accessors ---------------------------------------------------------------------------------
    def tile_access_range(self, tile: int) -> tuple[int, int]:
        """[start, stop) of tile `tile`'s accesses in the flat arrays."""
        self._check_tile(tile)
        first_step, end_step = self.tile_step_ptr[tile], self.tile_step_ptr[tile + 1]
        return int(self.step_ptr[first_step]), int(self.step_ptr[end_step])

    def tile_lines(self, tile: int) -> np.ndarray:
        """Line ids tile `tile` touches, in access order (a view, duplicates kept)."""
        start, stop = self.tile_access_range(tile)
        return self.lines[start:stop]

    def tile_steps(self, tile: int) -> list[np.ndarray]:
        """Line ids of each step of tile `tile` (views)."""
        self._check_tile(tile)
        ptr = self.step_ptr
        return [
            self.lines[ptr[s] : ptr[s + 1]] for s in range(int(self.tile_step_ptr[tile]), int(self.tile_step_ptr[tile + 1]))
        ]

    def steps_per_tile(self) -> np.ndarray:
        return np.diff(self.tile_step_ptr)

    def accesses_per_tile(self) -> np.ndarray:
        return np.diff(self.step_ptr[self.tile_step_ptr])

    def tensor_index_of_lines(self, lines: np.ndarray) -> np.ndarray:
        """Index into `tensors` of each line id (-1 where no tensor holds it)."""
        bases = np.array([t.base_line for t in self.tensors], dtype=np.int64)
        ends = np.array([t.end_line for t in self.tensors], dtype=np.int64)
        order = np.argsort(bases, kind="stable")
        pos = np.searchsorted(bases[order], lines, side="right") - 1
        idx = np.where(pos >= 0, order[np.clip(pos, 0, None)], -1)
        inside = (idx >= 0) & (lines < ends[np.clip(idx, 0, None)])
        return np.where(inside, idx, -1)

    def tensor(self, name: str) -> TensorInfo:
        for info in self.tensors:
            if info.name == name:
                return info
        raise UserError(f"trace has no tensor named {name!r}: it has {', '.join(t.name for t in self.tensors)}")

    def requested_bytes_by_tensor(self) -> dict[str, int]:
        """Bytes requested (sectors touched x sector size, repeats counted) per tensor, reads and writes."""
        idx = self.tensor_index_of_lines(self.lines)
        sectors = _popcount_u8(self.sector_mask).astype(np.int64)
        per = np.bincount(idx + 1, weights=sectors, minlength=len(self.tensors) + 1)[1:]
        return {t.name: int(per[i]) * self.sector_bytes for i, t in enumerate(self.tensors)}

    def footprint_bytes_by_tensor(self) -> dict[str, int]:
        """Distinct sectors touched x sector size per tensor (the compulsory traffic)."""
        order = np.argsort(self.lines, kind="stable")
        sorted_lines = self.lines[order]
        if sorted_lines.size == 0:
            return {t.name: 0 for t in self.tensors}
        starts = np.flatnonzero(np.r_[True, sorted_lines[1:] != sorted_lines[:-1]])
        union_mask = np.bitwise_or.reduceat(self.sector_mask[order], starts)
        unique_lines = sorted_lines[starts]
        idx = self.tensor_index_of_lines(unique_lines)
        per = np.bincount(idx + 1, weights=_popcount_u8(union_mask), minlength=len(self.tensors) + 1)[1:]
        return {t.name: int(per[i]) * self.sector_bytes for i, t in enumerate(self.tensors)}

    def tensor_bytes(self) -> dict[str, int]:
        """Allocated size of each tensor in whole lines."""
        return {t.name: t.n_lines * self.line_bytes for t in self.tensors}

    def summary(self) -> str:
        kind = self.meta.get("source", "trace")
        return (
            f"{kind} trace grid={self.grid} tiles={self.n_tiles} steps={self.n_steps} "
            f"accesses={self.n_accesses} tensors={','.join(t.name for t in self.tensors)}"
        )

    # ---- validation ----------------------------------------------------------------------------------
    def validate(self) -> AccessTrace:
        """Check dtypes, CSR consistency, masks and line ranges; raise UserError naming the first defect."""
        problems = self._problems()
        if problems:
            raise UserError(f"invalid access trace: {problems[0]}; rebuild it with TraceBuilder or trace_kernel")
        return self

    def _problems(self) -> list[str]:
        out: list[str] = []
        expect = {"lines": np.int64, "sector_mask": np.uint8, "is_write": np.bool_, "step_ptr": np.int64, "tile_step_ptr": np.int64}
        for name, dtype in expect.items():
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1:
                out.append(f"{name} must be a 1-D {np.dtype(dtype).name} array")
        if out:
            return out
        n = self.lines.size
        if self.sector_mask.size != n or self.is_write.size != n:
            out.append("lines, sector_mask and is_write differ in length")
        if self.step_ptr.size < 1 or self.step_ptr[0] != 0 or self.step_ptr[-1] != n or np.any(np.diff(self.step_ptr) < 0):
            out.append("step_ptr must start at 0, be non-decreasing and end at the number of accesses")
        n_steps = self.step_ptr.size - 1
        tsp = self.tile_step_ptr
        if tsp.size < 1 or tsp[0] != 0 or tsp[-1] != n_steps or np.any(np.diff(tsp) < 0):
            out.append("tile_step_ptr must start at 0, be non-decreasing and end at the number of steps")
        grid = tuple(int(g) for g in self.grid)
        if not grid or any(g < 1 for g in grid):
            out.append(f"grid {self.grid} must be a non-empty tuple of positive sizes")
        elif int(np.prod(grid)) != tsp.size - 1:
            out.append(f"grid {grid} has {int(np.prod(grid))} tiles but tile_step_ptr describes {tsp.size - 1}")
        if self.line_bytes % self.sector_bytes or not 1 <= self.line_bytes // self.sector_bytes <= 8:
            out.append("line_bytes must be 1..8 sectors of sector_bytes")
        elif n:
            full = (1 << (self.line_bytes // self.sector_bytes)) - 1
            if np.any(self.sector_mask == 0) or np.any(self.sector_mask & ~np.uint8(full)):
                out.append(f"sector_mask values must lie in 1..{full}")
        for a, b in zip(self.tensors, self.tensors[1:]):
            if b.base_line < a.end_line:
                out.append(f"tensors {a.name} and {b.name} overlap or are out of order")
        if n and self.tensors:
            bad = self._line_outside_tensors()
            if bad is not None:
                out.append(f"line {bad} lies outside every tensor")
        return out

    def _line_outside_tensors(self) -> int | None:
        """A line id no tensor holds, or None; O(n) without temporaries when tensors are packed without gaps."""
        spans = sorted((t.base_line, t.end_line) for t in self.tensors)
        packed = all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        low, high = int(self.lines.min()), int(self.lines.max())
        if packed:
            if low < spans[0][0]:
                return low
            if high >= spans[-1][1]:
                return high
            return None
        idx = self.tensor_index_of_lines(self.lines)
        return int(self.lines[np.argmax(idx < 0)]) if np.any(idx < 0) else None

    def _check_tile(self, tile: int) -> None:
        if not 0 <= tile < self.n_tiles:
            raise UserError(f"tile {tile} out of range: the trace has tiles 0..{self.n_tiles - 1}")

    # ---- storage -------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], compress: bool = True) -> Path:
        """Write the trace as .npz (compressed by default), atomically; returns the path."""
        header = {
            "format": "swizzlelab.trace",
            "version": FORMAT_VERSION,
            "grid": list(self.grid),
            "line_bytes": self.line_bytes,
            "sector_bytes": self.sector_bytes,
            "tensors": [[t.name, t.base_line, t.n_lines, t.elem_bytes] for t in self.tensors],
            "meta": self.meta,
            "l2_bound": bool(self.l2_bound),
        }
        buffer = io.BytesIO()
        saver = np.savez_compressed if compress else np.savez
        saver(
            buffer,
            header=np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8),
            lines=self.lines,
            sector_mask=self.sector_mask,
            is_write=self.is_write,
            step_ptr=self.step_ptr,
            tile_step_ptr=self.tile_step_ptr,
        )
        return atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AccessTrace:
        """Read a trace written by `save`; a missing or foreign file raises UserError."""
        target = Path(path)
        if not target.is_file():
            raise UserError(f"trace file {target} not found: write one with AccessTrace.save or `swizzlelab trace`")
        try:
            with np.load(target, allow_pickle=False) as data:
                header = json.loads(bytes(data["header"]).decode("utf-8"))
                arrays = {k: data[k] for k in ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr")}
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"{target} is not a swizzlelab trace ({type(err).__name__}): re-create it") from None
        if header.get("format") != "swizzlelab.trace" or header.get("version") != FORMAT_VERSION:
            raise UserError(f"{target} is not a version-{FORMAT_VERSION} swizzlelab trace: re-create it")
        trace = cls(
            tensors=[TensorInfo(str(n), int(b), int(c), int(e)) for n, b, c, e in header["tensors"]],
            grid=tuple(int(g) for g in header["grid"]),
            line_bytes=int(header["line_bytes"]),
            sector_bytes=int(header["sector_bytes"]),
            meta={str(k): str(v) for k, v in header.get("meta", {}).items()},
            l2_bound=header.get("l2_bound") is True,
            **arrays,
        )
        return trace.validate()


def _popcount_u8(values: np.ndarray) -> np.ndarray:
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
    return table[values]
