"""Derived traces (swizzlelab.trace.derive via userkernel.user_trace): a few programs interpreted at the real size, an
affine fit per grid piece checked on held-out programs, the rest laid out; equal, array for array, to the trace of
every program interpreted; non-affine kernels fall back with their reason; wrappers that launch more than once."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"
H100 = get_model("h100")
ARRAYS = ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr")


@dataclass(frozen=True)
class WildCase:
    """A tests/wild kernel at a small size whose tile grid is larger than derive's sample."""

    label: str
    file: str
    tensors: tuple[str, ...] = ()  # --tensor specs
    sizes: dict[str, int] = field(default_factory=dict)
    task: str | None = None  # inputs from this task's generate_input instead
    config: dict[str, Any] | None = None
    scalars: dict[str, Any] = field(default_factory=dict)
    launch: str | None = None  # the wrapper (a FILE.py:FUNCTION in tests/wild for a launcher beside the kernel)
    builder: str | None = None  # an --inputs FILE.py:FUNCTION in tests/wild
    target: str = "h100"  # the model the file's driver queries are answered as


SMALL_BLOCKS = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}
AB = ("a=float16[M,K]", "b=float16[K,N]")
# Add a wild kernel here (and it is checked derived == interpreted, with the fit really used).
WILD_CASES = [
    WildCase("tutorial_matmul divisible", "tutorial_matmul.py", sizes={"m": 512, "n": 384, "k": 128}, task="matmul",
             config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}),
    WildCase("tutorial_matmul ragged edges", "tutorial_matmul.py", sizes={"m": 500, "n": 470, "k": 100},
             task="matmul", config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}),
    WildCase("persistent_matmul", "persistent_matmul.py", sizes={"m": 2048, "n": 1280, "k": 64}, task="matmul"),
    WildCase("persistent_matmul ragged", "persistent_matmul.py", sizes={"m": 2000, "n": 1200, "k": 100},
             task="matmul"),
    WildCase("attention_fwd 2-D launch", "attention_fwd.py", tensors=("q=float16[Z,H,N,D]", "k=float16[Z,H,N,D]",
             "v=float16[Z,H,N,D]"), sizes={"Z": 2, "H": 3, "N": 1024, "D": 64}, scalars={"sm_scale": 0.5}),
    WildCase("row_sum unaligned rows", "row_sum.py", tensors=("x=float32[R,C]",), sizes={"R": 1001, "C": 300}),
    # the published files, unedited
    WildCase("triton_01 vector add", "triton_01_vector_add.py", tensors=("x=float32[N]", "y=float32[N]"),
             sizes={"N": 98000}),
    WildCase("triton_03 matmul ragged", "triton_03_matmul.py", sizes={"m": 500, "n": 470, "k": 100}, task="matmul",
             config=SMALL_BLOCKS),
    WildCase("triton_06 attention", "triton_06_fused_attention.py:_attn_fwd",
             tensors=("q=float16[Z,H,S,D]", "k=float16[Z,H,S,D]", "v=float16[Z,H,S,D]"),
             sizes={"Z": 1, "H": 3, "S": 1024, "D": 64}, scalars={"causal": False, "sm_scale": 0.5},
             config={"BLOCK_M": 64, "BLOCK_N": 32}),
    WildCase("triton_09 persistent, _compute_pid twice", "triton_09_persistent_matmul.py:matmul_kernel_persistent",
             tensors=AB, sizes={"M": 768, "N": 512, "K": 64}, config=SMALL_BLOCKS, launch="matmul_persistent"),
    WildCase("rocm_xcd matmul (MI300X)", "rocm_xcd_matmul_kernel.py", tensors=AB, sizes={"M": 512, "N": 512, "K": 64},
             launch="rocm_xcd_launch.py:matmul", target="mi300x"),
    WildCase("rocm_gemm heuristics", "rocm_gemm.py", tensors=(*AB, "c=float16[M,N]"),
             sizes={"M": 512, "N": 512, "K": 64}, scalars={"a_scale": None, "b_scale": None}, config=SMALL_BLOCKS),
]
# kernels whose addresses depend on their data: derivation falls back, with its reason, to every program
FALLBACK_CASES = [
    (WildCase("triton_08 grouped GEMM (pointer table)", "triton_08_grouped_gemm.py:grouped_matmul_kernel",
              tensors=("group_A=[float16[256,64],float16[128,128],float16[96,32]]",
                       "group_B=[float16[64,128],float16[128,64],float16[32,160]]"),
              config={**SMALL_BLOCKS, "NUM_SM": 16}, launch="group_gemm_fn"),
     "the kernel loads addresses from group_a_ptrs, group_b_ptrs, group_c_ptrs (tables of pointers)"),
    (WildCase("applied_ai fused MoE (routed tokens)", "applied_ai_fused_moe.py",
              sizes={"M": 96, "E": 4, "N": 128, "K": 32, "top_k": 2, "block_m": 16}, launch="invoke_fused_moe_kernel",
              builder="moe_inputs.py:moe_inputs"),
     "to fit an affine law"),
]


def _open(case: WildCase, directory: Path = WILD, launch: str | None = None):
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    inputs = Inputs(tuple(parse_tensor_spec(t) for t in case.tensors), dict(case.scalars), dict(case.sizes), seed=3,
                    task=load_task(case.task) if case.task else None,
                    builder=str(WILD / case.builder) if case.builder else None)
    launch = launch or case.launch
    if launch and ".py:" in launch:
        launch = str(directory / launch)
    return open_user_kernel(str(directory / case.file), get_model(case.target), config=case.config, inputs=inputs,
                            launch=launch)


def _traces(uk, derive: bool):
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    return trace_user_kernel(uk.launcher, uk.site, source=uk.analysed or None, derive=derive)


def _assert_same(derived, full) -> None:
    for name in ARRAYS:
        assert np.array_equal(getattr(derived.trace, name), getattr(full.trace, name)), name
    assert derived.trace.tensors == full.trace.tensors and derived.trace.grid == full.trace.grid
    assert np.array_equal(derived.order.perm, full.order.perm)


@pytest.mark.parametrize("case", WILD_CASES, ids=lambda c: c.label)
def test_derived_trace_equals_every_program_interpreted(case):
    uk = _open(case)
    derived = _traces(uk, derive=True)
    full = _traces(uk, derive=False)
    how = derived.how
    assert how.derivation is not None, how.reason
    # the fit was used (not every tile interpreted), and checked on tiles it did not use
    assert how.derivation.fit_tiles >= 2 and how.derivation.checked_tiles >= 4
    n_tiles = derived.order.perm.size
    assert how.derivation.fit_tiles + how.derivation.checked_tiles + how.derivation.exact_tiles < n_tiles
    assert how.interpreted_programs < full.how.interpreted_programs == full.n_programs
    assert full.how.derivation is None and full.how.reason == "derivation switched off"
    _assert_same(derived, full)
    assert "trace derived from" in derived.describe() and "real size" in derived.describe()


@pytest.mark.parametrize("case,reason", FALLBACK_CASES, ids=lambda c: getattr(c, "label", ""))
def test_data_dependent_wild_kernels_fall_back_with_their_reason(case, reason):
    uk = _open(case)
    traced = _traces(uk, derive=True)
    assert traced.how.derivation is None and reason in traced.how.reason
    assert f"fully interpreted ({traced.n_programs} programs): " in traced.describe()
    _assert_same(traced, _traces(uk, derive=False))


def test_small_grid_is_interpreted_whole_and_says_so():
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    case = WildCase("tiny", "tutorial_matmul.py", sizes={"m": 96, "n": 64, "k": 64}, task="matmul",
                    config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32})
    uk = _open(case)
    traced = trace_user_kernel(uk.launcher, uk.site)
    assert traced.how.derivation.exact_tiles == 6 and traced.how.derivation.fit_tiles == 0
    assert "interpreted every one of its 6 programs" in traced.describe()
    _assert_same(traced, trace_user_kernel(uk.launcher, uk.site, derive=False))


# ---- kernels whose addresses are not affine in the tile: the fallback and its reason ---------------------
GATHER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gather_rows_kernel(idx_ptr, x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    row = tl.abs(tl.load(idx_ptr + pid)) % n_rows
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + pid * n_cols + cols, v, mask=cols < n_cols)


def gather_rows(idx, x):
    out = torch.empty((idx.shape[0], x.shape[1]), device=x.device, dtype=x.dtype)
    gather_rows_kernel[(idx.shape[0],)](idx, x, out, x.shape[0], x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
'''

HISTOGRAM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def histogram_kernel(x_ptr, bins_ptr, n, n_bins, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(bins_ptr + tl.abs(v) % n_bins, 1, mask=offs < n)


def histogram(x, bins):
    histogram_kernel[(triton.cdiv(x.numel(), 64),)](x, bins, x.numel(), bins.numel(), BLOCK=64)
    return bins
'''


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


def test_data_dependent_rows_fall_back_with_the_reason(tmp_path, monkeypatch):
    import swizzlelab.userkernel.user_trace as user_trace
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    directory = _write(tmp_path, "gather_rows.py", GATHER)
    uk = _open(WildCase("gather", "gather_rows.py", tensors=("idx=int64[R]", "x=float32[S,C]"),
                        sizes={"R": 200, "S": 9, "C": 100}), directory)
    traced = trace_user_kernel(uk.launcher, uk.site)
    assert traced.how.derivation is None
    assert "x_ptr" in traced.how.reason and "the affine fit says" in traced.how.reason
    assert traced.how.interpreted_programs == 200
    assert "fully interpreted (200 programs): tile (" in traced.describe()
    _assert_same(traced, trace_user_kernel(uk.launcher, uk.site, derive=False))
    # 200 rows of 100 floats: 4 lines read and 4 written (or 5 when unaligned); too much for 4 KB of memory
    monkeypatch.setattr(user_trace, "available_memory_bytes", lambda: 4096)
    with pytest.raises(UserError, match=r"cannot be derived \(tile .*\) and interpreting every program would "
                                        r"record about 1,[0-9]{3} line accesses"):
        trace_user_kernel(uk.launcher, uk.site)
    monkeypatch.undo()
    # ... or too long for the caller's limit, at the sampled programs' pace (a leaderboard suggestion's child)
    with pytest.raises(UserError, match=r"cannot be derived \(tile .*\) and interpreting every one of its 200 "
                                        r"programs would take about .* ms each \(limit 0 s\)"):
        trace_user_kernel(uk.launcher, uk.site, max_interpret_s=1e-6)


def test_integer_atomics_fall_back_with_the_reason(tmp_path):
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    directory = _write(tmp_path, "histogram.py", HISTOGRAM)
    uk = _open(WildCase("histogram", "histogram.py", tensors=("x=int32[N]", "bins=int32[B]"),
                        sizes={"N": 64 * 40, "B": 16}), directory)
    traced = trace_user_kernel(uk.launcher, uk.site)
    assert traced.how.derivation is None and "atomics on integer tensor bins_ptr" in traced.how.reason
    _assert_same(traced, trace_user_kernel(uk.launcher, uk.site, derive=False))


# ---- wrappers that launch the kernel more than once --------------------------------------------------------
SCALE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def scale_once(x):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y


def scale_with_warmup(x):
    y = torch.empty_like(x)
    warm = x[:256]
    scale_kernel[(triton.cdiv(256, 128),)](warm, y, 256, BLOCK=128)
    scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y


def scale_twice(x):
    y = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    for _ in range(2):
        scale_kernel[grid](x, y, x.numel(), BLOCK=128)
    return y
'''


@pytest.mark.parametrize("wrapper", ["scale_with_warmup", "scale_twice"])
def test_wrapper_launching_twice_traces_the_largest_launch(tmp_path, wrapper):
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    directory = _write(tmp_path, "scale.py", SCALE)
    case = WildCase("scale", "scale.py", tensors=("x=float32[N]",), sizes={"N": 128 * 40 + 7})
    once = _open(case, directory, launch="scale_once")
    twice = _open(case, directory, launch=wrapper)
    single = trace_user_kernel(once.launcher, once.site)
    traced = trace_user_kernel(twice.launcher, twice.site)
    assert traced.how.launches == 2 and traced.how.launch_index == 1
    assert traced.launch_grid == (41, 1, 1) and traced.how.derivation is not None
    _assert_same(traced, single)
    _assert_same(trace_user_kernel(twice.launcher, twice.site, derive=False), single)
    assert "the wrapper launched the kernel 2 times; traced launch 2" in traced.describe()


# ---- the pieces ---------------------------------------------------------------------------------------------
def test_plan_takes_fit_points_corners_and_random_tiles_of_every_piece():
    from swizzlelab.trace.derive import grid_boxes, plan_tiles

    grid = (64, 64)
    plan = plan_tiles(grid, seed=5)
    coords = {tuple(int(c) for c in np.unravel_index(t, grid)) for t in plan}
    assert {(0, 0), (0, 63), (63, 0), (63, 63), (62, 62), (0, 62), (62, 0)} <= coords
    assert plan[:3] == [int(np.ravel_multi_index(c, grid)) for c in ((31, 31), (32, 31), (31, 32))]
    boxes = grid_boxes(grid)
    assert [b.size for b in boxes] == [63 * 63, 63, 63, 1]
    assert all(sum(b.holds(c) for c in coords) >= min(b.size, 4) for b in boxes)
    assert len(plan) == len(set(plan)) <= 24
    assert sorted(plan_tiles((3, 3))) == list(range(9))  # small: every tile


def test_only_chosen_programs_run():
    import triton
    import triton.language as tl

    from swizzlelab.trace.tracer import record_accesses

    @triton.jit
    def fill_kernel(y_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + pid)

    y = torch.full((8 * 32,), float("nan"))
    with record_accesses(False, choose=lambda name, before, grid: {2, 5}) as recorder:
        fill_kernel[(8,)](y, BLOCK=32)
    ran = ~torch.isnan(y.view(8, 32)).all(dim=1)
    assert ran.tolist() == [i in (2, 5) for i in range(8)]
    assert y.view(8, 32)[5].eq(5).all()
    launch = recorder.launches[0]
    assert launch.launch_grid == (8, 1, 1) and sorted(launch.programs) == [2, 5]


def test_a_trace_too_large_for_memory_is_refused_before_it_is_laid_out(monkeypatch):
    import swizzlelab.trace.derive as derive
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    uk = _open(WILD_CASES[0])
    monkeypatch.setattr(derive, "available_memory_bytes", lambda: 1 << 20)
    # 16 x 12 tiles of (4 K steps x (32 lines of A + 32 of B) + 32 lines of C) = 55,296 accesses of 10 bytes
    with pytest.raises(UserError, match=r"the trace holds 55,296 line accesses \(540.00 KB\) and this machine has "
                                        r"1.00 MB available"):
        trace_user_kernel(uk.launcher, uk.site)


def test_cli_simulate_says_how_the_trace_was_obtained():
    from typer.testing import CliRunner

    from swizzlelab.cli.main import app

    result = CliRunner().invoke(app, [
        "simulate", "--kernel", str(WILD / "row_sum.py"), "--tensor", "x=float32[R,C]", "--size", "R=400",
        "--size", "C=256", "--order", "stride:STRIDE=4",
    ])
    assert result.exit_code == 0, result.output
    assert "at its real size (x_ptr 400x256 float32, out_ptr 400 float32)" in result.output
    assert re.search(r"trace derived from 2 interpreted programs, checked against 6 more \(1 more at the grid's "
                     r"edges taken as interpreted\); traced in \d+\.\d s \(measured, this CPU\)", result.output)


@pytest.mark.slow
def test_tutorial_matmul_first_autotune_config_at_2048_derived_equals_interpreted():
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    uk = _open(WildCase("2048", "tutorial_matmul.py", sizes={"m": 2048, "n": 2048, "k": 2048}, task="matmul"))
    derived = trace_user_kernel(uk.launcher, uk.site)
    assert derived.order.grid == (16, 16) and derived.how.derivation is not None
    _assert_same(derived, trace_user_kernel(uk.launcher, uk.site, derive=False))


def _ops(lo: int, pattern: int = 0) -> Any:
    from swizzlelab.trace.derive import TileOps

    return TileOps(((0, 0, False, pattern),), np.array([lo], dtype=np.int64))


def test_a_law_that_leaves_its_tensor_where_nobody_looked_is_refused():
    from swizzlelab.trace.derive import NotDerivable, derive_trace
    from swizzlelab.trace.access_trace import TensorInfo

    tensors = [TensorInfo("x", 0, 40, 4)]
    patterns = [(4, np.arange(0, 64, 4, dtype=np.int64))]  # 16 floats: 64 bytes
    # tiles 5, 6 fit lo = 128 * (t - 5), 9 and 12 agree; tile 19 is the last piece, interpreted whole
    samples = {t: _ops(128 * (t - 5)) for t in (5, 6, 9, 12)}
    samples[19] = _ops(128 * 14)
    with pytest.raises(NotDerivable, match=r"puts op 0 of tile \(0\) outside x"):
        derive_trace(samples, (20,), tensors, patterns)
    # the same law from tile 0 on stays inside: the trace is laid out, one line per tile
    samples = {t: _ops(128 * t) for t in (5, 6, 9, 12, 0)}
    samples[19] = _ops(128 * 19)
    derived = derive_trace(samples, (20,), tensors, patterns)
    assert derived.trace.lines.tolist() == list(range(20)) and set(derived.trace.sector_mask.tolist()) == {0b0011}
    assert (derived.fit_tiles, derived.checked_tiles, derived.exact_tiles) == (2, 3, 1)


def test_mismatches_name_the_tile_and_op():
    from swizzlelab.trace.derive import NotDerivable, derive_trace
    from swizzlelab.trace.access_trace import TensorInfo

    tensors = [TensorInfo("x", 0, 400, 4)]
    patterns = [(4, np.arange(0, 64, 4, dtype=np.int64)), (4, np.arange(0, 32, 4, dtype=np.int64))]
    base = {t: _ops(64 * t) for t in (5, 6, 0, 18)}
    with pytest.raises(NotDerivable, match=r"tile \(12\): op 0 \(step 0, x\) starts at byte 1000, the affine fit says 768"):
        derive_trace({**base, 12: _ops(1000), 19: _ops(64 * 19)}, (20,), tensors, patterns)
    with pytest.raises(NotDerivable, match=r"tile \(12\): op 0 \(step 0, x\) touches another lane pattern"):
        derive_trace({**base, 12: _ops(768, pattern=1), 19: _ops(64 * 19)}, (20,), tensors, patterns)
    with pytest.raises(NotDerivable, match="only 1 held-out tiles"):
        derive_trace({5: _ops(320), 6: _ops(384), 7: _ops(448), 19: _ops(64 * 19)}, (20,), tensors, patterns)
