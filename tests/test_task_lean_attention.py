"""lean_attention task: stream-K decode attention passes its cases under the interpreter, swizzled or not.

Also: any program count splits the work correctly, check() rejects wrong outputs, bad sizes are UserErrors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from swizzlelab.errors import UserError
from swizzlelab.swizzle import parse_formula
from swizzlelab.tasks import load_task


REVERSED = "pid = tl.num_programs(0) - 1 - tl.program_id(0)\n"


@pytest.fixture(scope="module")
def task():
    return load_task("lean_attention")


def _run(task, case, order=None):
    data = task.generate_input(case)
    data["out"].fill_(float("nan"))
    output = task.custom_kernel(data, order)
    return data, output


def test_cases_exercise_masking_and_head_spanning(task):
    """The test cases must contain partial key blocks and programs that span several heads."""
    block_n = task.kernel.CPU_CONFIG.block_n
    ctx_lens = [n for case in task.cases("tests") for n in task.generate_input(case)["ctx_lens_list"]]
    assert any(n % block_n for n in ctx_lens) and min(ctx_lens) == 1
    case = task.cases("tests")[1]
    data = task.generate_input(case)
    offsets = task.kernel.block_offsets(data["ctx_lens"], case["heads"], block_n).numpy()
    n_programs = case["n_programs"]
    bounds = np.arange(n_programs + 1) * offsets[-1] // n_programs
    head_of = lambda unit: np.searchsorted(offsets, unit, side="right") - 1  # noqa: E731
    spans_heads = [head_of(lo) != head_of(hi - 1) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    split_heads = [head_of(b) == head_of(b - 1) for b in bounds[1:-1]]
    assert any(spans_heads) and any(split_heads)


@pytest.mark.parametrize("n_programs", [1, 2, 13, 64])
def test_any_program_count_splits_the_work(task, n_programs):
    """One program for everything, uneven splits, and more programs than work units (empty programs)."""
    case = {**task.cases("tests")[0], "n_programs": n_programs}
    data, output = _run(task, case, parse_formula(REVERSED, ("pid",)))
    result = task.check(data, output)
    assert result.ok, f"n_programs={n_programs}: {result.message}"


def test_block_offsets_prefix_sums(task):
    offsets = task.kernel.block_offsets(torch.tensor([1, 16, 17, 40], dtype=torch.int32), heads=2, block_n=16)
    assert offsets.tolist() == [0, 1, 2, 3, 4, 6, 8, 11, 14]


def test_check_rejects_perturbed_output(task):
    case = task.cases("tests")[0]
    data, output = _run(task, case)
    output[1, 3, 7] -= 0.25
    result = task.check(data, output)
    assert not result.ok and result.n_bad == 1 and result.worst_index == (1, 3, 7)


def test_check_rejects_attention_over_the_whole_cache(task):
    """A kernel that ignores ctx_lens (attends to all max_ctx cached rows) must fail."""
    case = task.cases("tests")[1]
    data = task.generate_input(case)
    assert min(data["ctx_lens_list"]) < case["max_ctx"]
    unmasked = torch.nn.functional.scaled_dot_product_attention(
        data["q"][:, :, None, :].float(), data["k"].float(), data["v"].float(), scale=data["sm_scale"], enable_gqa=True
    )[:, :, 0, :]
    result = task.check(data, unmasked.to(torch.float16))
    assert not result.ok and "elements differ" in result.message


def test_inputs_are_seeded_random(task):
    case = dict(task.cases("tests")[1])
    first, again = task.generate_input(case), task.generate_input(case)
    other = task.generate_input({**case, "seed": case["seed"] + 1})
    assert torch.equal(first["k"], again["k"]) and first["ctx_lens_list"] == again["ctx_lens_list"]
    assert not torch.equal(first["k"], other["k"])
    assert all(case["min_ctx"] <= n <= case["max_ctx"] for n in first["ctx_lens_list"])
    assert first["ctx_lens"].tolist() == first["ctx_lens_list"]


def test_benchmark_grid_is_the_program_count(task):
    for case in task.cases("benchmarks"):
        assert task.tile_grid(case, config=task.kernel.GPU_CONFIG) == (case["n_programs"],)


@pytest.mark.parametrize("bad", [{"kv_heads": 3}, {"min_ctx": 80, "max_ctx": 10}, {"head_dim": 100}, {"n_programs": 0}])
def test_bad_sizes_are_user_errors(task, bad):
    case = {**task.cases("tests")[0], **bad}
    with pytest.raises(UserError) as err:
        task.generate_input(case)
    assert "\n" not in str(err.value)


@pytest.mark.gpu
def test_benchmark_cases_pass_on_gpu(task):
    for case in task.cases("benchmarks"):
        data, output = _run(task, case, task.parse_order("xcd:NUM_XCDS=8"))
        result = task.check(data, output)
        assert result.ok, result.message


def test_mismatched_cache_is_a_user_error(task):
    data = task.generate_input(task.cases("tests")[0])
    data["v"] = data["v"][:, :, :-1].contiguous()
    with pytest.raises(UserError, match="expected k, v"):
        task.custom_kernel(data)


COMPILE_FOR_H100 = """
import re
import swizzlelab.runtime as runtime
runtime.ensure_triton_backend = lambda: "cuda"  # compile only, never launch: there may be no GPU here
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from swizzlelab.swizzle import apply_swizzle, parse_order
from swizzlelab.tasks.lean_attention import kernel as la

cfg = la.GPU_CONFIG
signature = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "ctx_lens_ptr": "*i32",
             "block_offsets_ptr": "*i32", "part_m_ptr": "*fp32", "part_l_ptr": "*fp32", "part_acc_ptr": "*fp32",
             "n_bh": "i32", "heads": "i32", "kv_heads": "i32", "max_ctx": "i32", "qk_scale_log2": "fp32",
             "HEAD_DIM": "constexpr", "BLOCK_N": "constexpr", "NUM_STAGES": "constexpr"}
# A GQA benchmark launch specializes: 16-byte aligned pointers; n_bh, heads, max_ctx divisible by 16 (kv_heads 8 not).
attrs = {(i,): [["tt.divisibility", 16]] for i in (*range(8), 8, 9, 11)}
consts = {"HEAD_DIM": 128, "BLOCK_N": cfg.block_n, "NUM_STAGES": cfg.num_stages}
fn = apply_swizzle(la.lean_attention_kernel, parse_order("xcd:NUM_XCDS=8", 1))
target = GPUTarget("cuda", 90, 32)
compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs), target=target,
                          options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
reduce_sig = {"block_offsets_ptr": "*i32", "part_m_ptr": "*fp32", "part_l_ptr": "*fp32", "part_acc_ptr": "*fp32",
              "out_ptr": "*fp16", "n_bh": "i32", "n_programs": "i32", "HEAD_DIM": "constexpr"}
triton.compile(ASTSource(fn=la.lean_reduce_kernel, signature=reduce_sig, constexprs={"HEAD_DIM": 128}),
               target=target, options={"num_warps": 4, "num_stages": 1})
ptx = compiled.asm["ptx"]
print("cp.async.cg" in ptx, len(re.findall(r"ld\\.global\\.v4", ptx)) + ptx.count("cp.async.cg"), compiled.metadata.shared)
"""


def test_kernels_compile_for_h100_with_pipelined_vector_loads(tmp_path):
    """Offline sm_90 compile (no GPU needed): the KV stream is loaded 16 bytes a lane through cp.async stages."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_H100], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    has_cp_async, n_vector_loads, shared_bytes = done.stdout.split()
    assert has_cp_async == "True" and int(n_vector_loads) > 0
    # 2 programs per SM (n_programs = 2 x SMs) must fit in the 228 KiB of shared memory of an SM.
    assert 2 * int(shared_bytes) <= 228 * 1024
