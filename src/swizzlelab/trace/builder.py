"""TraceBuilder: assemble an AccessTrace for an analytic access model from whole-grid numpy descriptions.

Each call describes one memory operation for many (tile, step) pairs at once; numba expands them to lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo

_KIND_BLOCK = 0
_KIND_EXPLICIT = 1


@dataclass(frozen=True)
class TensorRef:
    """A tensor registered with a TraceBuilder: shape and strides in elements, placed at byte `base_byte`."""

    index: int
    name: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    elem_bytes: int
    base_byte: int


@dataclass
class _OpBatch:
    """Memory ops added by one builder call, one row per op (all arrays of one length)."""

    tile: np.ndarray
    step: np.ndarray
    kind: int
    write: bool
    base_byte: np.ndarray  # block: byte address of the first row's element 0
    row_stride_bytes: np.ndarray
    n_rows: np.ndarray
    col0_bytes: np.ndarray  # block: byte range [col0, col1) inside each row
    col1_bytes: np.ndarray
    explicit_start: np.ndarray  # explicit: slice of the builder's explicit pool
    explicit_count: np.ndarray
    site: int = -1  # source-site id for auto_steps (-1: this call's own id)


def _block_batch(tile: np.ndarray, step: np.ndarray, write: bool, base_byte: np.ndarray, row_stride_bytes: np.ndarray,
                 n_rows: np.ndarray, col0_bytes: np.ndarray, col1_bytes: np.ndarray) -> _OpBatch:
    """Block ops (block() and span()): n_rows rows from base_byte, row_stride_bytes apart, bytes [col0, col1) of
    each (an empty range where col1 < col0)."""
    zeros = np.zeros(tile.size, dtype=np.int64)
    return _OpBatch(tile=tile, step=step, kind=_KIND_BLOCK, write=write, base_byte=base_byte,
                    row_stride_bytes=row_stride_bytes, n_rows=n_rows, col0_bytes=col0_bytes,
                    col1_bytes=np.maximum(col1_bytes, col0_bytes), explicit_start=zeros, explicit_count=zeros)


class TraceBuilder:
    """Collect tensors and memory ops of every tile, then `build()` one AccessTrace.

    Ops of one (tile, step) appear in the order of the builder calls, and within a call in the row-major order
    of the broadcast (tile, step, ...) arrays. Each op's lines are ascending and distinct (one line per op
    even when several rows share it, with the sectors OR-ed), matching what `trace_kernel` records for one
    load or store instruction.

    With `auto_steps=True` the `step` arguments are program-order keys instead, and steps are cut by the
    tracer's rule: a new step starts when an op of a source site already seen in the current step recurs.
    Each call is its own site unless `site=` names a shared one (two calls modelling one instruction).
    Ops that touch nothing (fully masked) still count for that rule, as in the tracer.
    """

    def __init__(
        self, grid: tuple[int, ...], line_bytes: int = 128, sector_bytes: int = 32, auto_steps: bool = False
    ) -> None:
        grid = tuple(int(g) for g in grid)
        if not grid or any(g < 1 for g in grid):
            raise UserError(f"tile grid {grid} must be a non-empty tuple of positive sizes")
        if line_bytes % sector_bytes or not 1 <= line_bytes // sector_bytes <= 8:
            raise UserError(f"line_bytes={line_bytes} must hold 1..8 sectors of sector_bytes={sector_bytes}")
        self.grid = grid
        self.n_tiles = int(np.prod(grid))
        self.line_bytes = line_bytes
        self.sector_bytes = sector_bytes
        self.auto_steps = auto_steps
        self._tensors: list[TensorRef] = []
        self._infos: list[TensorInfo] = []
        self._next_line = 0
        self._batches: list[_OpBatch] = []
        self._pool_lines: list[np.ndarray] = []
        self._pool_masks: list[np.ndarray] = []
        self._pool_size = 0

    # ---- tensors -------------------------------------------------------------------------------------
    def tensor(
        self, name: str, shape: tuple[int, ...], elem_bytes: int, strides: tuple[int, ...] | None = None
    ) -> TensorRef:
        """Register a tensor (row-major unless `strides`, in elements) at the next free line-aligned range."""
        shape = tuple(int(s) for s in shape)
        if any(t.name == name for t in self._tensors):
            raise UserError(f"tensor {name!r} registered twice: give each tensor its own name")
        if not shape or any(s < 1 for s in shape):
            raise UserError(f"tensor {name!r} has shape {shape}: every dimension must be >= 1")
        if elem_bytes not in (1, 2, 4, 8, 16):
            raise UserError(f"tensor {name!r} has elem_bytes={elem_bytes}: use 1, 2, 4, 8 or 16")
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape) or any(s < 0 for s in strides):
            raise UserError(f"tensor {name!r}: strides {strides} must be {len(shape)} non-negative numbers")
        extent_bytes = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * elem_bytes
        n_lines = -(-extent_bytes // self.line_bytes)
        ref = TensorRef(len(self._tensors), name, shape, strides, elem_bytes, self._next_line * self.line_bytes)
        self._tensors.append(ref)
        self._infos.append(TensorInfo(name, self._next_line, n_lines, elem_bytes))
        self._next_line += n_lines
        return ref

    # ---- ops -----------------------------------------------------------------------------------------
    def block(
        self,
        tensor: TensorRef,
        tile: np.ndarray | int,
        step: np.ndarray | int,
        rows: tuple[np.ndarray | int, np.ndarray | int],
        cols: tuple[np.ndarray | int, np.ndarray | int],
        lead: tuple[np.ndarray | int, ...] = (),
        write: bool = False,
        site: int | None = None,
    ) -> None:
        """Each (tile, step) reads (or writes) rows r0:r1, cols c0:c1 of the last two dims, clipped at the edges.

        `lead` indexes the leading dimensions (batch, head, ...). All arguments broadcast against each other.
        """
        if len(tensor.shape) < 2:
            raise UserError(f"block() needs a tensor of rank >= 2 but {tensor.name} has shape {tensor.shape}: use span()")
        if len(lead) != len(tensor.shape) - 2:
            raise UserError(f"block() on {tensor.name} needs {len(tensor.shape) - 2} leading indices, got {len(lead)}")
        if tensor.strides[-1] != 1:
            raise UserError(f"block() needs unit stride in the last dim of {tensor.name}: register its storage order")
        arrays = np.broadcast_arrays(
            *(np.asarray(a, dtype=np.int64) for a in (tile, step, rows[0], rows[1], cols[0], cols[1], *lead))
        )
        tile_a, step_a, r0, r1, c0, c1 = (a.ravel() for a in arrays[:6])
        n_rows_total, n_cols_total = tensor.shape[-2], tensor.shape[-1]
        r0c, r1c = np.clip(r0, 0, n_rows_total), np.clip(r1, 0, n_rows_total)
        c0c, c1c = np.clip(c0, 0, n_cols_total), np.clip(c1, 0, n_cols_total)
        offset = np.zeros_like(r0c)
        for index, (idx, size, stride) in enumerate(zip(arrays[6:], tensor.shape, tensor.strides)):
            idx = idx.ravel()
            if np.any((idx < 0) | (idx >= size)):
                raise UserError(f"block() on {tensor.name}: leading index {index} outside 0..{size - 1}")
            offset = offset + idx * stride
        eb = tensor.elem_bytes
        row_stride_bytes = tensor.strides[-2] * eb
        width_bytes = (c1c - c0c) * eb
        if row_stride_bytes < int(width_bytes.max(initial=0)) and int((r1c - r0c).max(initial=0)) > 1:
            raise UserError(f"block() on {tensor.name}: rows overlap in memory (row stride < block width)")
        base_byte = tensor.base_byte + (offset + r0c * tensor.strides[-2]) * eb
        strides = np.full(tile_a.size, row_stride_bytes, dtype=np.int64)
        batch = _block_batch(tile_a, step_a, write, base_byte, strides, np.maximum(r1c - r0c, 0), c0c * eb, c1c * eb)
        self._add(batch, site)

    def span(
        self,
        tensor: TensorRef,
        tile: np.ndarray | int,
        step: np.ndarray | int,
        start: np.ndarray | int,
        stop: np.ndarray | int,
        write: bool = False,
        site: int | None = None,
    ) -> None:
        """Each (tile, step) reads (or writes) flat elements start:stop of a contiguous tensor, clipped."""
        if any(s != e for s, e in zip(tensor.strides, _row_major_strides(tensor.shape))):
            raise UserError(f"span() needs a contiguous tensor but {tensor.name} has strides {tensor.strides}")
        tile_a, step_a, s0, s1 = (
            a.ravel() for a in np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (tile, step, start, stop)))
        )
        numel = int(np.prod(tensor.shape))
        s0c, s1c = np.clip(s0, 0, numel), np.clip(s1, 0, numel)
        eb = tensor.elem_bytes
        # one "row" per op: the flat range itself
        base_byte = np.full(tile_a.size, tensor.base_byte, dtype=np.int64)
        no_stride = np.zeros(tile_a.size, dtype=np.int64)
        n_rows = (s1c > s0c).astype(np.int64)
        self._add(_block_batch(tile_a, step_a, write, base_byte, no_stride, n_rows, s0c * eb, s1c * eb), site)

    def gather(
        self,
        tensor: TensorRef,
        tile: np.ndarray | int,
        step: np.ndarray | int,
        index: np.ndarray,
        write: bool = False,
        site: int | None = None,
    ) -> None:
        """Elements at flat `index` (per element: its tile and step) form one op per distinct (tile, step).

        Out-of-range indices raise (a real kernel would fault); pass only unmasked elements. A (tile, step)
        without elements has no op here, so it does not count for the auto_steps rule.
        """
        tile_a, step_a, idx = _flat_int64(tile, step, index)
        numel = int(np.prod(tensor.shape))
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= numel:
            raise UserError(f"gather() on {tensor.name}: index outside 0..{numel - 1}")
        if len(tensor.shape) > 1:
            # flat index -> storage offset through the strides
            offs = np.zeros_like(idx)
            rest = idx.copy()
            for size, stride in zip(reversed(tensor.shape), reversed(tensor.strides)):
                offs += (rest % size) * stride
                rest //= size
        else:
            offs = idx * tensor.strides[0] if tensor.strides[0] != 1 else idx
        geometry = (tensor.base_byte, tensor.elem_bytes, self.line_bytes, self.sector_bytes)
        n_lines, n_ops, status = _gather_lines(tile_a, step_a, offs, *geometry, *_gather_outputs(0, 0))
        if status == _UNSORTED:  # lines must ascend within each (tile, step): sort once, then count again
            order = np.lexsort((offs, step_a, tile_a))
            tile_a, step_a, offs = tile_a[order], step_a[order], offs[order]
            del order
            n_lines, n_ops, status = _gather_lines(tile_a, step_a, offs, *geometry, *_gather_outputs(0, 0))
        if status == _STRADDLES:
            raise UserError(f"gather() on {tensor.name}: an element straddles two lines (misaligned storage)")
        outputs = _gather_outputs(n_lines, n_ops)
        _gather_lines(tile_a, step_a, offs, *geometry, *outputs)
        lines, masks, op_tile, op_step, op_start = outputs
        zeros = np.zeros(n_ops, dtype=np.int64)
        self._add(
            _OpBatch(
                tile=op_tile,
                step=op_step,
                kind=_KIND_EXPLICIT,
                write=write,
                base_byte=zeros,
                row_stride_bytes=zeros,
                n_rows=zeros,
                col0_bytes=zeros,
                col1_bytes=zeros,
                explicit_start=self._pool_size + op_start,
                explicit_count=np.diff(np.r_[op_start, n_lines]),
            ),
            site,
        )
        self._pool_lines.append(lines)
        self._pool_masks.append(masks)
        self._pool_size += n_lines

    def _add(self, batch: _OpBatch, site: int | None) -> None:
        if batch.tile.size == 0:
            return
        if site is not None and site < 0:
            raise UserError(f"site id {site} must be >= 0")
        batch.site = -1 - len(self._batches) if site is None else site
        if batch.tile.min() < 0 or batch.tile.max() >= self.n_tiles:
            raise UserError(f"tile index outside 0..{self.n_tiles - 1} for grid {self.grid}")
        if batch.step.min() < 0:
            raise UserError("step index must be >= 0")
        self._batches.append(batch)

    # ---- build ---------------------------------------------------------------------------------------
    def build(self, meta: dict[str, str] | None = None, max_accesses: int = 2_000_000_000) -> AccessTrace:
        """Expand every op to lines in (tile, step, call order) and return the validated trace.

        Refuses (UserError) traces of more than `max_accesses` line accesses (10 bytes each in memory).
        """
        if not self._batches:
            empty = np.zeros(0, dtype=np.int64)
            return AccessTrace(
                empty, np.zeros(0, np.uint8), np.zeros(0, bool), np.zeros(1, np.int64),
                np.zeros(self.n_tiles + 1, np.int64), list(self._infos), self.grid,
                self.line_bytes, self.sector_bytes, {"source": "model", **(meta or {})},
            ).validate()

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(batch, name) for batch in self._batches])

        tile, step = cat("tile"), cat("step")
        call = np.concatenate([np.full(b.tile.size, i, dtype=np.int64) for i, b in enumerate(self._batches)])
        # stable sort on (tile, step, call); within a call the input order is kept
        order = np.lexsort((call, step, tile))
        del call
        kind = np.concatenate([np.full(b.tile.size, b.kind, dtype=np.int8) for b in self._batches])[order]
        write = np.concatenate([np.full(b.tile.size, b.write, dtype=np.bool_) for b in self._batches])[order]
        fields = [
            cat(name)[order]
            for name in ("base_byte", "row_stride_bytes", "n_rows", "col0_bytes", "col1_bytes", "explicit_start", "explicit_count")
        ]
        tile, step = tile[order], step[order]
        if self.auto_steps:
            site = np.concatenate([np.full(b.tile.size, b.site, dtype=np.int64) for b in self._batches])[order]
            _, site_ids = np.unique(site, return_inverse=True)
            step = _assign_steps(tile, site_ids.astype(np.int64), int(site_ids.max()) + 1)
        pool_lines = np.concatenate(self._pool_lines) if self._pool_lines else np.zeros(0, np.int64)
        pool_masks = np.concatenate(self._pool_masks) if self._pool_masks else np.zeros(0, np.uint8)

        counts = _count_ops(kind, *fields, self.line_bytes)
        op_offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=op_offsets[1:])
        n_access = int(op_offsets[-1])
        if n_access > max_accesses:
            raise UserError(
                f"this access model has {n_access:,} line accesses (~{fmt_bytes(n_access * 10)}), over the "
                f"limit of {max_accesses:,}: use a smaller case or larger blocks (the GPU config)"
            )
        lines = np.empty(n_access, dtype=np.int64)
        masks = np.empty(n_access, dtype=np.uint8)
        writes = np.empty(n_access, dtype=np.bool_)
        _fill_ops(kind, write, *fields, op_offsets, pool_lines, pool_masks, self.line_bytes, self.sector_bytes, lines, masks, writes)

        # steps: runs of equal (tile, step) among ops that produced accesses
        nonempty = counts > 0
        t_ne, s_ne, off_ne = tile[nonempty], step[nonempty], op_offsets[:-1][nonempty]
        first = np.r_[True, (t_ne[1:] != t_ne[:-1]) | (s_ne[1:] != s_ne[:-1])] if t_ne.size else np.zeros(0, bool)
        step_ptr = np.r_[off_ne[first], n_access].astype(np.int64)
        steps_per_tile = np.bincount(t_ne[first], minlength=self.n_tiles)
        tile_step_ptr = np.zeros(self.n_tiles + 1, dtype=np.int64)
        np.cumsum(steps_per_tile, out=tile_step_ptr[1:])
        meta = {"source": "model", **(meta or {})}
        return AccessTrace(
            lines, masks, writes, step_ptr, tile_step_ptr, list(self._infos), self.grid,
            self.line_bytes, self.sector_bytes, meta,
        ).validate()


def _flat_int64(*arrays: np.ndarray | int) -> list[np.ndarray]:
    """Broadcast to one shape and flatten; no copies for arrays that are already flat int64 of that shape."""
    converted = [np.asarray(a, dtype=np.int64) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape for a in converted))
    return [a.reshape(-1) if a.shape == shape else np.broadcast_to(a, shape).reshape(-1) for a in converted]


def _gather_outputs(n_lines: int, n_ops: int) -> tuple[np.ndarray, ...]:
    return (
        np.empty(n_lines, np.int64), np.empty(n_lines, np.uint8),
        np.empty(n_ops, np.int64), np.empty(n_ops, np.int64), np.empty(n_ops, np.int64),
    )


_SORTED, _UNSORTED, _STRADDLES = 0, 1, 2


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@numba.njit(cache=True, nogil=True)
def _gather_lines(
    tile, step, offs, base_byte, elem_bytes, line_bytes, sector_bytes, out_lines, out_masks, op_tile, op_step, op_start
):  # pragma: no cover - numba
    """Distinct lines (OR-ed sectors) per run of equal (tile, step); counts only when the outputs are empty.

    Returns (n_lines, n_ops, status): status 1 when the input is not in (tile, step, line) order, 2 when an
    element straddles two lines.
    """
    fill = out_lines.size > 0
    n_lines = 0
    n_ops = 0
    last_line = -1
    for i in range(tile.size):
        lo = base_byte + offs[i] * elem_bytes
        hi = lo + elem_bytes - 1
        line = lo // line_bytes
        if hi // line_bytes != line:
            return n_lines, n_ops, 2
        start = line * line_bytes
        s0 = (lo - start) // sector_bytes
        s1 = (hi - start) // sector_bytes
        mask = ((1 << (s1 + 1)) - 1) ^ ((1 << s0) - 1)
        new_op = i == 0 or tile[i] != tile[i - 1] or step[i] != step[i - 1]
        if new_op and i > 0 and (tile[i] < tile[i - 1] or (tile[i] == tile[i - 1] and step[i] < step[i - 1])):
            return n_lines, n_ops, 1  # runs must come in (tile, step) order so that each pair is one run
        if new_op:
            if fill:
                op_tile[n_ops] = tile[i]
                op_step[n_ops] = step[i]
                op_start[n_ops] = n_lines
            n_ops += 1
        elif line < last_line:
            return n_lines, n_ops, 1
        if not new_op and line == last_line:
            if fill:
                out_masks[n_lines - 1] |= mask
        else:
            if fill:
                out_lines[n_lines] = line
                out_masks[n_lines] = mask
            n_lines += 1
        last_line = line
    return n_lines, n_ops, 0


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))


@numba.njit(cache=True, nogil=True)
def _assign_steps(tile, site, n_sites):  # pragma: no cover - numba
    """The tracer's step rule over ops sorted in program order: a site recurring in a step opens the next."""
    step = np.empty(tile.size, dtype=np.int64)
    last_seen = np.full(n_sites, -1, dtype=np.int64)
    current = -1
    for op in range(tile.size):
        if op == 0 or tile[op] != tile[op - 1]:
            last_seen[:] = -1
            current = 0
        elif last_seen[site[op]] == current:
            current += 1
        last_seen[site[op]] = current
        step[op] = current
    return step


@numba.njit(cache=True, nogil=True)
def _count_ops(kind, base, rstride, nrows, c0, c1, ex_start, ex_count, line_bytes):  # pragma: no cover - numba
    n = kind.size
    counts = np.zeros(n, dtype=np.int64)
    for op in range(n):
        if kind[op] == 1:
            counts[op] = ex_count[op]
            continue
        if c1[op] <= c0[op]:
            continue
        total = 0
        prev = -1
        for r in range(nrows[op]):
            row = base[op] + r * rstride[op]
            first = (row + c0[op]) // line_bytes
            last = (row + c1[op] - 1) // line_bytes
            if first == prev:
                first += 1
            if last >= first:
                total += last - first + 1
            if last > prev:
                prev = last
        counts[op] = total
    return counts


# size: a numba kernel takes its arrays and scalars as separate arguments (what njit compiles and types one by one).
@numba.njit(cache=True, nogil=True)
def _fill_ops(
    kind, write, base, rstride, nrows, c0, c1, ex_start, ex_count, offsets, pool_lines, pool_masks,
    line_bytes, sector_bytes, out_lines, out_masks, out_writes,
):  # pragma: no cover - numba
    for op in range(kind.size):
        pos = offsets[op]
        if kind[op] == 1:
            for i in range(ex_count[op]):
                out_lines[pos + i] = pool_lines[ex_start[op] + i]
                out_masks[pos + i] = pool_masks[ex_start[op] + i]
                out_writes[pos + i] = write[op]
            continue
        if c1[op] <= c0[op]:
            continue
        prev = -1
        for r in range(nrows[op]):
            lo = base[op] + r * rstride[op] + c0[op]
            hi = base[op] + r * rstride[op] + c1[op] - 1
            for line in range(lo // line_bytes, hi // line_bytes + 1):
                start = line * line_bytes
                s0 = (max(lo, start) - start) // sector_bytes
                s1 = (min(hi, start + line_bytes - 1) - start) // sector_bytes
                mask = ((1 << (s1 + 1)) - 1) ^ ((1 << s0) - 1)
                if line == prev:
                    out_masks[pos - 1] |= mask
                else:
                    out_lines[pos] = line
                    out_masks[pos] = mask
                    out_writes[pos] = write[op]
                    pos += 1
                    prev = line
