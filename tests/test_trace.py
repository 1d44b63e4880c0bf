"""Tests of swizzlelab.trace: AccessTrace storage/validation, TraceBuilder footprints, the interpreter tracer.

Expected lines are computed by hand from byte offsets (128-byte lines, 32-byte sectors).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from swizzlelab.errors import UserError
from swizzlelab.trace import AccessTrace, TraceBuilder, compare_traces, record_accesses, trace_call, trace_kernel


# ---- tiny kernels ---------------------------------------------------------------------------------------
@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=ok), mask=ok)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def gather_kernel(idx_ptr, x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    cols = tl.load(idx_ptr + offs)
    tl.store(out_ptr + offs, tl.load(x_ptr + cols))


@triton.jit
def histogram_kernel(x_ptr, bins_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(bins_ptr + tl.load(x_ptr + offs), 1)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


@triton.jit
def descriptor_copy_kernel(x_desc, y_ptr, N: tl.constexpr, B: tl.constexpr):
    pid = tl.program_id(0)
    tile = x_desc.load([pid * B, 0])
    rows = pid * B + tl.arange(0, B)
    tl.store(y_ptr + rows[:, None] * N + tl.arange(0, N)[None, :], tile, mask=(rows < 40)[:, None])


@triton.jit
def touch_2d_kernel(x_ptr):
    # program (p0, p1) writes the 32 floats (one line) at line p0 * 10 + p1
    offs = (tl.program_id(0) * 10 + tl.program_id(1)) * 32 + tl.arange(0, 32)
    tl.store(x_ptr + offs, tl.zeros([32], dtype=tl.float32))


@triton.jit
def table_copy_kernel(src_table, dst_table, n, BLOCK: tl.constexpr):
    # program g copies buffer g: both addresses are read from device arrays of pointers
    g = tl.program_id(0)
    src = tl.load(src_table + g).to(tl.pointer_type(tl.float32))
    dst = tl.load(dst_table + g).to(tl.pointer_type(tl.float32))
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def _accesses(trace: AccessTrace, tile: int) -> list[tuple[int, int, bool]]:
    start, stop = trace.tile_access_range(tile)
    return [(int(l), int(m), bool(w)) for l, m, w in zip(trace.lines[start:stop], trace.sector_mask[start:stop], trace.is_write[start:stop])]


# ---- tracer ---------------------------------------------------------------------------------------------
def test_copy_kernel_trace_equals_hand_computed_lines():
    x = torch.randn(100)
    y = torch.full((100,), float("nan"))
    trace = trace_kernel(copy_kernel, (4,), (x, y, 100), {"BLOCK": 32})
    assert [t.name for t in trace.tensors] == ["x_ptr", "y_ptr"]  # the kernel's parameter names
    # 100 fp32 = 400 bytes = 4 lines each; y starts at line 4
    assert [(t.base_line, t.n_lines, t.elem_bytes) for t in trace.tensors] == [(0, 4, 4), (4, 4, 4)]
    for tile in range(3):
        assert _accesses(trace, tile) == [(tile, 0b1111, False), (4 + tile, 0b1111, True)]
    # tile 3 holds elements 96..99: bytes 384..399, the first sector of line 3 only (masked lanes are no access)
    assert _accesses(trace, 3) == [(3, 0b0001, False), (7, 0b0001, True)]
    assert trace.steps_per_tile().tolist() == [1, 1, 1, 1]
    assert trace.meta["source"] == "traced" and trace.meta["kernel"] == "copy_kernel"
    # skip_arithmetic: loads return zeros, the stores still write them
    assert torch.all(y == 0)


def test_copy_kernel_real_values_when_not_skipping():
    x = torch.randn(64)
    y = torch.full((64,), float("nan"))
    trace_kernel(copy_kernel, (2,), (x, y, 64), {"BLOCK": 32}, skip_arithmetic=False)
    assert torch.equal(x, y)


def test_loop_steps_and_store_in_last_step():
    # 3 rows of 40 fp32 (160 bytes: rows share lines), BLOCK 16 -> 3 steps per row
    x = torch.randn(3, 40)
    out = torch.empty(3)
    trace = trace_kernel(row_sum_kernel, (3,), (x, out), {"n_cols": 40, "BLOCK": 16})
    assert trace.steps_per_tile().tolist() == [3, 3, 3]
    x_lines = trace.tensor("x_ptr").n_lines
    assert x_lines == 4  # 480 bytes
    steps = trace.tile_steps(1)
    # row 1 = bytes 160..319: cols 0..15 -> bytes 160..223 (line 1, sectors 1,2); cols 16..31 -> 224..287
    # (line 1 sector 3, line 2 sector 0); cols 32..39 -> 288..319 (line 2 sector 1) + store out[1]
    assert steps[0].tolist() == [1]
    assert steps[1].tolist() == [1, 2]
    assert steps[2].tolist() == [2, x_lines]
    start, stop = trace.tile_access_range(1)
    assert trace.sector_mask[start:stop].tolist() == [0b0110, 0b1000, 0b0001, 0b0010, 0b0001]
    assert trace.is_write[start:stop].tolist() == [False, False, False, False, True]


def test_index_loads_stay_real_under_skip_arithmetic():
    idx = torch.tensor([0, 40, 41, 5, 100, 100, 3, 64], dtype=torch.int32)
    x = torch.randn(128)
    out = torch.empty(8)
    trace = trace_kernel(gather_kernel, (2,), (idx, x, out), {"BLOCK": 4})
    x_base = trace.tensor("x_ptr").base_line
    # program 0 gathers x[0, 40, 41, 5]: bytes 0, 160, 164, 20 -> line 0 sector 0, line 1 sector 1
    steps0 = trace.tile_steps(0)[0]
    start, stop = trace.tile_access_range(0)
    got = list(zip(steps0.tolist(), trace.sector_mask[start:stop].tolist()))
    assert got[1:3] == [(x_base + 0, 0b0001), (x_base + 1, 0b0010)]
    # program 1 gathers x[100, 100, 3, 64]: bytes 400 (line 3 s0), 12 (line 0 s0), 256 (line 2 s0)
    start, stop = trace.tile_access_range(1)
    got = list(zip(trace.lines[start:stop].tolist(), trace.sector_mask[start:stop].tolist()))
    assert got[1:4] == [(x_base + 0, 1), (x_base + 2, 1), (x_base + 3, 1)]


def test_atomics_are_recorded_as_writes():
    x = torch.tensor([0, 1, 33, 63, 2, 2, 2, 40], dtype=torch.int32)
    bins = torch.zeros(64, dtype=torch.int32)
    trace = trace_kernel(histogram_kernel, (2,), (x, bins), {"BLOCK": 4})
    assert torch.equal(bins, torch.bincount(x.long(), minlength=64).int())
    start, stop = trace.tile_access_range(0)
    # bins 0, 1, 33, 63 -> bytes 0, 4, 132, 252 -> line 0 s0, line 1 s0 and s3
    base = trace.tensor("bins_ptr").base_line
    assert trace.lines[start + 1 : stop].tolist() == [base, base + 1]
    assert trace.sector_mask[start + 1 : stop].tolist() == [0b0001, 0b1001]
    assert trace.is_write[start:stop].tolist() == [False, True, True]


def test_dot_is_skipped_but_still_traced():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    c = torch.full((16, 16), float("nan"))
    trace = trace_kernel(dot_kernel, (1,), (a, b, c), {"N": 16})
    assert torch.all(c == 0)
    assert trace.n_accesses == 3 * 8  # 16 rows x 64 bytes = 8 lines per tensor
    trace_kernel(dot_kernel, (1,), (a, b, c), {"N": 16}, skip_arithmetic=False)
    torch.testing.assert_close(c, a @ b, rtol=1e-2, atol=1e-2)


def test_tensor_descriptor_loads_are_traced():
    from triton.tools.tensor_descriptor import TensorDescriptor

    x, y = torch.randn(40, 32), torch.empty(40, 32)
    trace = trace_kernel(descriptor_copy_kernel, (3,), (TensorDescriptor.from_tensor(x, [16, 32]), y), {"N": 32, "B": 16})
    assert [t.name for t in trace.tensors] == ["x_desc", "y_ptr"]
    # one 128-byte row per line; the last block's rows 40..47 lie outside the descriptor's shape: no access
    assert trace.tile_lines(1).tolist() == list(range(16, 32)) + list(range(40 + 16, 40 + 32))
    assert trace.tile_lines(2).tolist() == list(range(32, 40)) + list(range(40 + 32, 40 + 40))


def test_2d_launch_maps_launch_index_to_tile():
    x = torch.empty(64 * 32)
    trace = trace_kernel(touch_2d_kernel, (2, 3), (x,), launch_grid=(3, 2))
    # launch index = pid0 + 3 * pid1 (axis 0 fastest) is the tile index
    expected = [p0 * 10 + p1 for p1 in range(2) for p0 in range(3)]
    assert [trace.tile_lines(t).tolist() for t in range(6)] == [[line] for line in expected]


def test_hooks_are_restored_after_tracing():
    from triton.runtime import interpreter

    before = interpreter.InterpreterBuilder.create_masked_load
    with record_accesses():
        assert interpreter.InterpreterBuilder.create_masked_load is not before
    assert interpreter.InterpreterBuilder.create_masked_load is before


def test_trace_call_picks_one_launch():
    x, y = torch.randn(64), torch.empty(64)

    def launch_twice(rows: int):
        copy_kernel[(2,)](x, y, 64, BLOCK=32)
        row_sum_kernel[(rows,)](x.view(rows, 64 // rows), y, n_cols=64 // rows, BLOCK=16)

    with pytest.raises(UserError, match="expected one launch"):
        trace_call(lambda: launch_twice(2), (2,))
    trace = trace_call(lambda: launch_twice(2), (2,), kernel_name="row_sum_kernel")
    assert trace.steps_per_tile().tolist() == [2, 2]
    # unnamed: the one launch whose program count matches the tile grid
    trace = trace_call(lambda: launch_twice(1), (1,))
    assert trace.meta["kernel"] == "row_sum_kernel" and trace.steps_per_tile().tolist() == [4]


def test_tracer_errors_are_one_line():
    x, y = torch.randn(64), torch.empty(64)
    with pytest.raises(UserError) as err:
        trace_kernel(copy_kernel, (3,), (x, y, 64), {"BLOCK": 32}, launch_grid=(2,))
    assert "\n" not in str(err.value) and "tile grid" in str(err.value)
    with pytest.raises(UserError) as err:
        trace_kernel(copy_kernel, (2,), (x, y, 64), {"BLOCKS": 32})
    assert "\n" not in str(err.value) and "interpreter" in str(err.value)
    with pytest.raises(UserError, match="not an interpreted Triton kernel"):
        trace_kernel(lambda *a: None, (2,), (x, y, 64))
    # an index whose address is outside every argument: heap layout varies with what ran before, so a fixed
    # index may land inside y or idx itself (seen once in a full run)
    def inside(addr: int, tensors) -> bool:
        return any(t.data_ptr() <= addr < t.data_ptr() + t.numel() * t.element_size() for t in tensors)

    idx = torch.tensor([0, 1, 2, 0], dtype=torch.int32)
    idx[3] = next(i for i in range(1000, 1 << 20, 997) if not inside(x.data_ptr() + 4 * i, (x, y, idx)))
    with pytest.raises(UserError, match="outside every tensor argument"):
        trace_kernel(gather_kernel, (1,), (idx, x, y), {"BLOCK": 4})


def test_pointers_loaded_from_address_tables_resolve_to_the_tensors_held():
    """A kernel that loads its buffers' addresses from int64 tensors (tutorial 08's grouped GEMM): the accesses
    land in tensors the launching code holds (in lists here), named as it names them and laid out after the
    arguments in the tables' order; without a table, an access outside the arguments stays an error."""
    sources = [torch.randn(40), torch.randn(64)]
    targets = [torch.empty(40), torch.empty(64)]
    stray = torch.randn(64)  # held, but no table points into it: never adopted
    src_table = torch.tensor([t.data_ptr() for t in sources], dtype=torch.int64)
    dst_table = torch.tensor([t.data_ptr() for t in targets], dtype=torch.int64)

    def launch():
        table_copy_kernel[(2,)](src_table, dst_table, 40, BLOCK=64)

    trace = trace_call(launch, (2,), skip_arithmetic=False)
    names = [t.name for t in trace.tensors]
    assert names == ["src_table", "dst_table", "sources[0]", "sources[1]", "targets[0]", "targets[1]"]
    assert torch.equal(targets[0], sources[0]) and torch.equal(targets[1][:40], sources[1][:40])
    base = {t.name: t.base_line for t in trace.tensors}
    # program 1 reads table entry 1 of each table (line 0 and 1), then 160 bytes of sources[1] (2 lines), and
    # writes the same of targets[1]
    assert [(line, write) for line, _, write in _accesses(trace, 1)] == [
        (0, False), (1, False), (base["sources[1]"], False), (base["sources[1]"] + 1, False),
        (base["targets[1]"], True), (base["targets[1]"] + 1, True)]
    assert stray.numel() and "stray" not in names
    wrong = torch.tensor([stray.data_ptr() + 10**9], dtype=torch.int64)
    with pytest.raises(UserError, match="outside every tensor argument"):
        trace_call(lambda: table_copy_kernel[(1,)](wrong, dst_table, 40, BLOCK=64), (1,))


# ---- builder --------------------------------------------------------------------------------------------
def test_builder_block_footprint_with_edges_and_shared_lines():
    builder = TraceBuilder((2,))
    # 5 x 24 fp16 rows of 48 bytes: consecutive rows share lines
    x = builder.tensor("x", (5, 24), 2)
    y = builder.tensor("y", (300,), 4)
    builder.block(x, np.array([0, 1]), 0, (np.array([0, 3]), np.array([3, 6])), (8, 40))
    builder.span(y, 1, 2, 250, 400, write=True)
    trace = builder.build()
    assert trace.meta["source"] == "model"
    assert [(t.base_line, t.n_lines) for t in trace.tensors] == [(0, 2), (2, 10)]
    # tile 0 rows 0..2 cols 8..23: bytes 16..47, 64..95, 112..143 -> line 0 sectors {0,1,2,3}, line 1 sector 0
    assert _accesses(trace, 0) == [(0, 0b1111, False), (1, 0b0001, False)]
    # tile 1 rows 3..4 (row 5 clipped): bytes 160..191, 208..239 -> line 1 sectors {1, 2, 3}
    # then y[250:300] (clipped): bytes 1000..1199 -> lines 7 (s3), 8, 9 (s0..s1) of y
    assert _accesses(trace, 1) == [(1, 0b1110, False), (2 + 7, 0b1000, True), (2 + 8, 0b1111, True), (2 + 9, 0b0011, True)]
    assert trace.steps_per_tile().tolist() == [1, 2]


def test_builder_gather_groups_per_tile_and_step():
    builder = TraceBuilder((2,))
    x = builder.tensor("x", (1000,), 8)
    builder.gather(x, np.array([0, 0, 0, 1, 1]), np.array([0, 0, 1, 0, 0]), np.array([17, 2, 900, 3, 5]))
    trace = builder.build()
    # tile 0 step 0: x[17] (byte 136, line 1 s0), x[2] (byte 16, line 0 s0); step 1: x[900] (byte 7200: line 56 s1)
    assert trace.tile_steps(0)[0].tolist() == [0, 1]
    assert trace.tile_steps(0)[1].tolist() == [56]
    # tile 1: x[3], x[5] -> bytes 24 and 40: line 0 sectors 0 and 1 OR-ed
    assert _accesses(trace, 1) == [(0, 0b0011, False)]
    # interleaved (tile, step) runs are merged into one op per pair
    builder = TraceBuilder((2,))
    x = builder.tensor("x", (1000,), 8)
    builder.gather(x, np.array([0, 1, 0]), 0, np.array([40, 0, 1]))
    trace = builder.build()
    # x[40]: byte 320 = line 2 sector 2; x[1]: byte 8 = line 0 sector 0
    assert _accesses(trace, 0) == [(0, 0b0001, False), (2, 0b0100, False)] and _accesses(trace, 1) == [(0, 1, False)]


def test_builder_orders_by_tile_step_then_call():
    builder = TraceBuilder((1, 2))
    a = builder.tensor("a", (4, 64), 2)
    b = builder.tensor("b", (4, 64), 2)
    builder.block(b, np.array([1, 1]), np.array([1, 0]), (0, 1), (0, 64))
    builder.block(a, 1, 0, (2, 3), (0, 64))
    trace = builder.build()
    assert trace.tile_steps(0) == []
    assert [s.tolist() for s in trace.tile_steps(1)] == [[4, 2], [4]]


def test_builder_rejects_bad_input_with_one_line():
    builder = TraceBuilder((2, 2))
    x = builder.tensor("x", (8, 8), 4)
    for call in (
        lambda: builder.tensor("x", (4,), 4),
        lambda: builder.tensor("z", (0, 4), 4),
        lambda: builder.tensor("w", (4,), 3),
        lambda: builder.block(x, 4, 0, (0, 1), (0, 1)),
        lambda: builder.block(x, 0, 0, (0, 1), (0, 1), lead=(0,)),
        lambda: builder.gather(x, 0, 0, np.array([64])),
        lambda: TraceBuilder((0, 3)),
    ):
        with pytest.raises(UserError) as err:
            call()
        assert "\n" not in str(err.value)


def test_builder_refuses_oversized_traces():
    builder = TraceBuilder((4,))
    x = builder.tensor("x", (64, 64), 4)
    builder.block(x, np.arange(4), 0, (0, 64), (0, 64))
    with pytest.raises(UserError, match="line accesses"):
        builder.build(max_accesses=100)
    assert builder.build().n_accesses == 4 * 128


def test_builder_matches_tracer_on_row_sum():
    x = torch.randn(3, 40)
    traced = trace_kernel(row_sum_kernel, (3,), (x, torch.empty(3)), {"n_cols": 40, "BLOCK": 16})
    builder = TraceBuilder((3,))
    xt = builder.tensor("x_ptr", (3, 40), 4)
    out = builder.tensor("out_ptr", (3,), 4)
    rows = np.arange(3)[:, None]
    starts = np.arange(0, 40, 16)[None, :]
    builder.block(xt, rows, np.arange(3)[None, :], (rows, rows + 1), (starts, starts + 16))
    builder.span(out, np.arange(3), 2, np.arange(3), np.arange(3) + 1, write=True)
    diff = compare_traces(builder.build(), traced)
    assert diff.equal, diff.message


# ---- storage and validation -----------------------------------------------------------------------------
def _small_trace() -> AccessTrace:
    builder = TraceBuilder((2, 3))
    x = builder.tensor("x", (64, 64), 2)
    tiles = np.arange(6)
    builder.block(x, tiles[:, None], np.arange(2)[None, :], (tiles[:, None] * 8, tiles[:, None] * 8 + 8), (0, 64))
    return builder.build({"task": "unit"})


def test_save_load_round_trip(tmp_path):
    trace = _small_trace()
    path = trace.save(tmp_path / "t.npz")
    loaded = AccessTrace.load(path)
    for name in ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr"):
        assert np.array_equal(getattr(loaded, name), getattr(trace, name))
        assert getattr(loaded, name).dtype == getattr(trace, name).dtype
    assert loaded.tensors == trace.tensors and loaded.grid == (2, 3) and loaded.meta == trace.meta
    assert not list(tmp_path.glob(".*.tmp"))


def test_load_and_validate_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="not found"):
        AccessTrace.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a swizzlelab trace"):
        AccessTrace.load(tmp_path / "junk.npz")
    trace = _small_trace()
    trace.step_ptr = trace.step_ptr[:-1]
    with pytest.raises(UserError) as err:
        trace.validate()
    assert "\n" not in str(err.value)
    trace = _small_trace()
    trace.sector_mask[3] = 0
    with pytest.raises(UserError, match="sector_mask"):
        trace.validate()
    trace = _small_trace()
    trace.lines[0] = 10_000
    with pytest.raises(UserError, match="outside every tensor"):
        trace.validate()


def test_byte_accounting():
    trace = _small_trace()
    # each tile reads 8 rows x 128 bytes twice (2 steps): 6 * 2 * 8 * 128 bytes requested, 6 * 8 * 128 distinct
    assert trace.requested_bytes_by_tensor() == {"x": 6 * 2 * 8 * 128}
    assert trace.footprint_bytes_by_tensor() == {"x": 48 * 128}
    assert trace.tensor_bytes() == {"x": 64 * 128}
