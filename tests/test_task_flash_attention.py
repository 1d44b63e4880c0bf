"""flash_attention task: cases pass through the registry under the interpreter, with and without swizzles.

Also: check() rejects wrong outputs (perturbed, unmasked padding, unwritten tiles, wrong dtype), bad sizes error.
"""

from __future__ import annotations

import pytest
import torch

from swizzlelab.errors import UserError
from swizzlelab.swizzle import parse_formula
from swizzlelab.tasks import load_task


@pytest.fixture(scope="module")
def task():
    return load_task("flash_attention")


def _run(task, case, order=None):
    data = task.generate_input(case)
    data["out"].fill_(float("nan"))
    output = task.custom_kernel(data, order)
    return data, output


def test_check_rejects_perturbed_output(task):
    case = task.cases("tests")[0]
    data, output = _run(task, case)
    output[0, 1, 36, 5] += 0.25  # the last (masked) query block of the second head
    result = task.check(data, output)
    assert not result.ok
    assert result.n_bad == 1 and result.worst_index == (0, 1, 36, 5)


def test_check_rejects_attention_over_padded_keys(task):
    """A kernel that forgets the key mask (softmax over zero-padded keys up to the block size) must fail."""
    case = task.cases("tests")[0]  # seq 37: padding to 48 adds 11 keys with score 0
    data = task.generate_input(case)
    pad = 48 - data["k"].shape[2]
    k = torch.nn.functional.pad(data["k"], (0, 0, 0, pad))
    v = torch.nn.functional.pad(data["v"], (0, 0, 0, pad))
    q = torch.nn.functional.pad(data["q"], (0, 0, 0, pad))
    unmasked = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=data["sm_scale"])
    result = task.check(data, unmasked[:, :, : data["q"].shape[2]].to(torch.float16).contiguous())
    assert not result.ok
    assert "elements differ" in result.message


def test_check_rejects_tiles_left_unwritten(task):
    """A non-bijective order computes tile (0, 0) every time; the poisoned rest of the output must fail."""
    case = task.cases("tests")[1]
    broken = parse_formula("pid = tl.program_id(0)\npid_m = pid * 0\npid_n = pid * 0\n", ("pid_m", "pid_n"))
    data, output = _run(task, case, broken)
    result = task.check(data, output)
    assert not result.ok
    assert result.n_bad > 0


def test_check_rejects_wrong_dtype(task):
    case = task.cases("tests")[3]
    data, output = _run(task, case)
    result = task.check(data, output.float())
    assert not result.ok and "dtype" in result.message


def test_inputs_are_seeded_random_and_fresh(task):
    case = dict(task.cases("tests")[0])
    first, again = task.generate_input(case), task.generate_input(case)
    other = task.generate_input({**case, "seed": case["seed"] + 1})
    assert torch.equal(first["q"], again["q"]) and torch.equal(first["v"], again["v"])
    assert not torch.equal(first["q"], other["q"])
    assert first["q"].abs().sum() > 0 and not torch.equal(first["q"], first["k"])
    assert first["out"].shape == first["q"].shape and first["out"].dtype == torch.float16
    assert torch.isnan(first["out"]).all()  # poisoned, so an unwritten element fails the check


def test_benchmark_grid_walks_heads_outer(task):
    """GPU config: (batch*heads, seq/BLOCK_M) so row-major keeps one head's query blocks together."""
    case = task.cases("benchmarks")[0]
    gpu = task.kernel.GPU_CONFIG
    assert task.tile_grid(case, config=gpu) == (4 * 64, 8192 // gpu.block_m)
    args, consts = task.swizzle_args(case, config=gpu)
    assert args == {"n_bh": 256, "seq_len": 8192}
    assert consts["BLOCK_M"] == gpu.block_m and consts["EVEN_N"] is True


@pytest.mark.parametrize("bad", [{"head_dim": 48}, {"seq": 0}])
def test_bad_sizes_are_user_errors(task, bad):
    case = {**task.cases("tests")[0], **bad}
    with pytest.raises(UserError) as err:
        task.generate_input(case)
    assert "\n" not in str(err.value)


@pytest.mark.gpu
def test_benchmark_case_passes_on_gpu(task):
    case = task.cases("benchmarks")[0]
    data, output = _run(task, case, task.parse_order("grouped:GROUP_M=4"))
    result = task.check(data, output)
    assert result.ok, result.message


def test_non_contiguous_input_is_a_user_error(task):
    data = task.generate_input(task.cases("tests")[3])
    data["k"] = data["k"].transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(UserError, match="contiguous"):
        task.custom_kernel(data)


COMPILE_FOR_H100 = """
import swizzlelab.runtime as runtime
runtime.ensure_triton_backend = lambda: "cuda"  # compile only, never launch: there may be no GPU here
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from swizzlelab.swizzle import apply_swizzle, parse_order
from swizzlelab.tasks.flash_attention import kernel as fa

cfg = fa.GPU_CONFIG
signature = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "out_ptr": "*fp16", "n_bh": "i32",
             "seq_len": "i32", "qk_scale_log2": "fp32", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
             "BLOCK_N": "constexpr", "EVEN_N": "constexpr"}
# What a launch at the benchmark size specializes: 16-byte aligned pointers, n_bh and seq_len divisible by 16.
attrs = {(i,): [["tt.divisibility", 16]] for i in range(6)}
consts = {"HEAD_DIM": 128, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "EVEN_N": True}
fn = apply_swizzle(fa.flash_attention_kernel, parse_order("grouped:GROUP_M=4", 2))
compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
ptx = compiled.asm["ptx"]
print("wgmma" in ptx, "cp.async" in ptx, compiled.metadata.shared)
"""


def test_kernel_compiles_for_h100_with_wgmma_and_pipelined_loads(tmp_path):
    """Offline sm_90 compile (no GPU needed): tensor-core wgmma and cp.async pipelining, within shared memory."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_H100], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    has_wgmma, has_cp_async, shared_bytes = done.stdout.split()
    assert has_wgmma == "True" and has_cp_async == "True"
    assert int(shared_bytes) <= 227 * 1024  # H100 opt-in shared memory per block
