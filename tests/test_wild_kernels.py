"""What issue 55 found on kernels beyond Triton's tutorials, one test each: stream-K's two phases spliced with one
order (both run), torch.compile's output run whole before and after and put back as a user-defined Triton op, a
TORCH_COMPILE_DEBUG folder, a kernel's other remap named with the --site that takes it, orders in the kernel's own
terms, an autotune config that does not fit the GPU skipped in one line, dtypes as --arg values and in the run's
JSON. The wild files' runs through optimize/simulate/eval are tests/test_wild_published.py's."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from swizzlelab.errors import FormulaError, UserError
from swizzlelab.hw import get_model
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"
H100 = get_model("h100")
sys.path.insert(0, str(Path(__file__).parent))
import test_wild_published as published  # noqa: E402 - the rows (options as typed) live there


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spliced_file(row_name: str, order: str, tmp_path: Path) -> tuple[Path, object]:
    """The row's file with `order` at its site (and twins), as best_kernel.py carries one."""
    from swizzlelab.scenario import scenario_from_user_kernel

    row = published.PUBLISHED[row_name]
    user_kernel = published._open(row.options, row.target, task=row.task)
    formula = scenario_from_user_kernel(user_kernel, row.target, occupancy=1).parse_order(order)
    path = tmp_path / f"{row_name}_{order.replace(':', '_').replace('=', '')}.py"
    path.write_text(user_kernel.file_source(formula))
    return path, user_kernel


def test_stream_k_phases_both_take_the_order_and_compute_the_same(tmp_path: Path) -> None:
    """tritonbench's stream-K (its AMD variant: the interpreter has no descriptor atomics for the CUDA one) where
    both phases run: 6 tiles of 128x128 (its launcher's own tile size) on a 4-SM sibling of the H100 (the target
    the device queries are answered for), 4 tiles in the persistent loop, 2 split in the stream-K loop. The file
    with another order at both remaps computes exactly what the original does (integer-valued inputs: every
    partial sum is exact in float16, whichever program adds it), and the file with it at the first remap only
    does not."""
    from swizzlelab.hw.model import variant
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    spliced, user_kernel = _spliced_file("streamk_amd", "identity", tmp_path)  # grouped is column-major on 2x3
    assert [t.index for t in user_kernel.marked.twins] == ["tile_id"]
    lines = spliced.read_text().splitlines()
    twin_at = max(i for i, line in enumerate(lines) if line.strip() == "swz_launch = tile_id")
    end = next(i for i in range(twin_at, len(lines)) if lines[i].strip().startswith("pid_n = "))
    original_remap = (WILD / "tritonbench_stream_k.py").read_text().splitlines()[215:220]
    assert original_remap[0].strip().startswith("group_id = tile_id")
    broken = tmp_path / "first_only.py"
    broken.write_text("\n".join(lines[:twin_at] + original_remap + lines[end + 1:]) + "\n")

    generator = torch.Generator().manual_seed(5)
    a = torch.randint(-2, 3, (256, 64), generator=generator).to(torch.float16)
    b = torch.randint(-2, 3, (64, 384), generator=generator).to(torch.float16)
    inputs = Inputs((parse_tensor_spec("a=float16[256,64]"), parse_tensor_spec("b=float16[64,384]")))
    four_sms = variant(H100, n_units=4, units_per_domain=4)
    outs = {}
    for name, path in (("original", WILD / "tritonbench_stream_k.py"), ("spliced", spliced), ("broken", broken)):
        opened = open_user_kernel(f"{path}:streamk_amd_gemm", four_sms, inputs=inputs)  # config 0: 128x128x64
        outs[name] = opened.launcher(None, {"a": a.clone(), "b": b.clone()})
    assert torch.equal(outs["original"], (a.float() @ b.float()).to(torch.float16))
    assert torch.equal(outs["spliced"], outs["original"])
    assert not torch.equal(outs["broken"], outs["original"])  # the twin matters: the stream-K tiles move


def test_a_stream_k_size_with_split_tiles_says_which_sizes_trace() -> None:
    """144 tiles over 132 SMs: the stream-K phase takes tiles split between programs; the one line says so."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    inputs = Inputs((parse_tensor_spec("a=float16[384,64]"), parse_tensor_spec("b=float16[384,64]")))
    opened = open_user_kernel(f"{WILD / 'tritonbench_stream_k.py'}:streamk_cuda_gemm", H100, inputs=inputs,
                              config={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})
    with pytest.raises(UserError, match=r"other phase \(over curr_tile\) takes the tiles left, split between programs.*"
                                        r"a tile count that is a multiple of the SM count"):
        opened.trace()


def test_torch_compile_output_runs_whole_and_goes_back_as_a_triton_op(tmp_path: Path) -> None:
    """best_kernel.py of torch.compile's output is still that module: call(get_args()) runs it (Inductor's own
    runtime, the Triton interpreter here) and gives the original's output; the kernel's text from it, made a
    user-defined Triton op as docs/your-kernel.md shows, computes the same."""
    from torch._inductor import config as inductor_config

    from swizzlelab.userkernel.shim import device_shim

    spliced, user_kernel = _spliced_file("inductor", "column_major", tmp_path)
    assert user_kernel.name == "triton_tem_fused_mm_relu_0"
    text = spliced.read_text()
    assert "grid_m" in text.split("# swizzle: begin")[1].split("# swizzle: end")[0]  # in the kernel's own terms
    outs = []
    saved = inductor_config.cpu_backend
    inductor_config.cpu_backend = "triton"
    try:
        with device_shim(H100, True):
            for i, path in enumerate((WILD / "inductor_mm_output_code.py", spliced)):
                module = _module(path, f"swz_inductor_{i}")
                torch.manual_seed(0)
                args = module.get_args()
                outs.append((args, module.call(list(args))[0]))
    finally:
        inductor_config.cpu_backend = saved
    (x, w1, w2), first = outs[0]
    assert torch.equal(outs[1][1], first)
    assert torch.allclose(first, torch.relu(x @ w1) @ w2, rtol=1e-4, atol=1e-3)

    # put back as docs/your-kernel.md says: the kernel's text from best_kernel.py, Inductor's decorator dropped
    call = next(n.value for n in ast.parse(text).body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and ast.unparse(n.value.func).endswith("async_compile.triton")
                and n.value.args[0].value == "triton_tem_fused_mm_relu_0")
    kernel_text = call.args[1].value
    tree = ast.parse(kernel_text)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    func.decorator_list = [ast.parse("triton.jit", mode="eval").body]
    op = tmp_path / "mm_relu_op.py"
    op.write_text("import torch\nimport triton\nimport triton.language as tl\n"
                  "from torch._inductor.runtime import triton_helpers\n"
                  "from torch.library import triton_op, wrap_triton\n\n" + ast.unparse(func) + "\n\n"
                  "@triton_op('swztest::mm_relu', mutates_args={})\n"
                  "def mm_relu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:\n"
                  "    out = torch.empty((x.shape[0], w.shape[1]), device=x.device, dtype=x.dtype)\n"
                  "    wrap_triton(triton_tem_fused_mm_relu_0)[(8, 1, 1)](x, w, out, num_warps=8, num_stages=4)\n"
                  "    return out\n")
    with device_shim(H100, True):
        _module(op, "swz_mm_relu_op")
        h = torch.ops.swztest.mm_relu(x, w1)
    assert torch.allclose(h, torch.relu(x @ w1), rtol=1e-4, atol=1e-4)


def test_compiled_copies_are_traced_by_a_child_that_opens_the_same_kernel() -> None:
    """The GPU path on a CPU (the file imported with the interpreter off): the interpreted child rebuilds the
    kernel this process chose (torch.compile's output: the one with the most programs, no name given) with the
    same inputs (call()'s buffers), and traces what this process traces interpreting it."""
    import numpy as np

    from swizzlelab.userkernel import open_user_kernel

    spec = str(WILD / "inductor_mm_output_code.py")
    # interpreted first: the kernels' text imports Inductor's triton_helpers, whose @triton.jit helpers are built
    # once per process in the mode of its first import (a GPU host's parent only ever compiles them)
    here = open_user_kernel(spec, H100).trace()
    compiled = open_user_kernel(spec, H100, interpret=False)
    assert type(compiled.kernel.jit_fn).__name__ == "JITFunction" and "child process" in compiled.trace_method
    in_child = compiled.trace()
    assert in_child.launch_grid == here.launch_grid == (8, 1, 1)
    assert np.array_equal(in_child.trace.lines, here.trace.lines) and in_child.trace.lines.size > 0


def test_a_torch_compile_debug_folder_is_a_kernel_spec(tmp_path: Path) -> None:
    """`--kernel FOLDER[:KERNEL]`: the output_code.py a TORCH_COMPILE_DEBUG run left in it; two outputs there
    are refused in one line naming them."""
    from swizzlelab.userkernel import open_user_kernel

    folder = tmp_path / "torch_compile_debug" / "run_1" / "torchinductor" / "model__0_inference_0.0"
    folder.mkdir(parents=True)
    shutil.copy(WILD / "inductor_mm_output_code.py", folder / "output_code.py")
    root = tmp_path / "torch_compile_debug"
    user_kernel = open_user_kernel(f"{root}:triton_tem_fused_mm_relu_1", H100)
    assert user_kernel.kfile.path == folder / "output_code.py" and user_kernel.name == "triton_tem_fused_mm_relu_1"
    assert "grid (4, 1, 1)" in user_kernel.launcher.describe()
    other = root / "run_2" / "output_code.py"
    other.parent.mkdir()
    shutil.copy(WILD / "inductor_mm_output_code.py", other)
    with pytest.raises(UserError, match="holds 2 torch.compile outputs"):
        open_user_kernel(str(root), H100)


TWO_REMAPS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def two_grids(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(x_ptr + rows[:, None] * N + cols[None, :], pid + 0.0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    col_m = pid % num_pid_m
    col_n = pid // num_pid_m
    rows_y = col_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_y = col_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(y_ptr + rows_y[:, None] * N + cols_y[None, :], pid + 0.0)


def fill(x, y):
    M, N = x.shape
    two_grids[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](x, y, M, N, BLOCK_M=16, BLOCK_N=16)
    return x, y
'''


def test_another_remap_is_named_with_the_site_that_takes_it(tmp_path: Path) -> None:
    """A kernel that remaps its launch twice, differently: the run takes the first, names the other with the
    --site A-B that optimizes it, and that --site opens it."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    path = tmp_path / "two_grids.py"
    path.write_text(TWO_REMAPS)
    inputs = Inputs((parse_tensor_spec("x=float32[64,48]"), parse_tensor_spec("y=float32[64,48]")))
    first = open_user_kernel(str(path), H100, inputs=inputs)
    assert first.site_lines() == "lines 9-12"
    said = [line for line in first.describe() if "another remap" in line]
    assert said == ["  another remap at lines 17-18 (yielding col_m, col_n) is not this run's: optimize it with "
                    "--site 17-18"]
    second = open_user_kernel(str(path), H100, inputs=inputs, site="17-18")
    assert second.site_lines() == "lines 17-18" and second.trace().order.grid == (4, 3)


def test_orders_read_the_kernels_own_tile_counts() -> None:
    """The terms: the kernel's own names where it has them (checked against the traced tile grid), an
    expression where it has none, a name that counts something else dropped with the reason."""
    from swizzlelab.swizzle import family
    from swizzlelab.userkernel.terms import grid_terms

    source = ("def k(a_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n"
              "    grid_n = (N + BLOCK_N - 1) // BLOCK_N\n"
              "    # swizzle: begin\n"
              "    pid = tl.program_id(0)\n"
              "    pid_m = pid // grid_n\n"
              "    pid_n = pid % grid_n\n"
              "    # swizzle: end\n"
              "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n"
              "    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n"
              "    tl.store(a_ptr + offs_m[:, None] * N + offs_n[None, :], 1, mask=offs_m[:, None] < M)\n")
    terms = grid_terms(source, 3, 6, ("pid_m", "pid_n"), ("pid_m", "pid_n"), {"a_ptr", "M", "N", "BLOCK_M", "BLOCK_N"})
    assert terms.names == {"num_pid_m": "tl.cdiv(M, BLOCK_M)", "num_pid_n": "grid_n"}
    assert terms.derived == ("num_pid_m",)
    text = terms.rewrite(family("column_major")).normalized_source()
    assert "num_pid_m = tl.cdiv(M, BLOCK_M)" in text and "grid_n" not in text  # column_major reads only num_pid_m
    assert "grid_n" in terms.rewrite(family("grouped", GROUP_M=4)).normalized_source()
    checked = terms.checked({"M": 96, "N": 64, "BLOCK_M": 32, "BLOCK_N": 32, "grid_n": 5}, (3, 2))
    assert "num_pid_n" not in checked.names and checked.missing["num_pid_n"] == "grid_n is 5 at this launch, the tile grid has 2"
    assert "refused" in checked.describe()
    with pytest.raises(FormulaError, match=r"reads the tile count along pid_n \(num_pid_n\), which this kernel's terms "
                                           r"lack: grid_n is 5 at this launch"):
        checked.rewrite(family("grouped", GROUP_M=4))


def test_an_autotune_config_too_large_for_the_gpu_is_skipped_in_one_line() -> None:
    """As Triton's autotuner does: the next config that fits runs, the skipped ones are said with their bytes; a
    config the user chose that does not fit is refused in one line."""
    from swizzlelab.userkernel.autotune import Tuned, fitting
    from swizzlelab.userkernel.load import TuneConfig

    class Kernel:
        name = "gemm"
        autotune_configs = tuple(TuneConfig({"BLOCK_SIZE_M": m}, 8, 2) for m in (256, 256, 128))

    need = {0: 262144, 1: 245760, 2: 98304}
    shared = lambda index: (need[index], 232448)  # noqa: E731 - an H100's 227 KiB
    tuned = fitting(Kernel, Tuned(0, " (the first: ...)"), False, None, shared)
    assert tuned.index == 2
    assert "configs config 0 (262144 B), config 1 (245760 B) need more shared memory than this GPU's 232448 B" in tuned.why
    assert "skipped, as Triton's autotuner skips them" in tuned.why
    assert fitting(Kernel, Tuned(2, ""), False, None, shared).index == 2
    with pytest.raises(UserError, match="--autotune-config 0 .* needs 262144 B of shared memory and this GPU has 232448 B"):
        fitting(Kernel, Tuned(0, ""), False, 0, shared)


def test_dtypes_as_arguments_and_in_the_runs_json() -> None:
    """`--arg out_dtype=torch.float16` is the dtype (vLLM's launcher takes one); a case records it as text, so the
    run's identity and logs are JSON (an --inputs function returning a dtype crashed optimize's state file)."""
    import triton
    import triton.language as tl

    from swizzlelab.userkernel.launch import case_value, parse_scalar

    assert parse_scalar("out_dtype=torch.float16") == ("out_dtype", torch.float16)
    assert parse_scalar("acc=tl.float32") == ("acc", tl.float32)
    with pytest.raises(UserError, match="torch.float17 is not a torch dtype"):
        parse_scalar("out_dtype=torch.float17")
    values = {k: case_value(v) for k, v in {"out_dtype": torch.float16, "config": triton.Config({"BLOCK_M": 32}),
                                            "x": torch.zeros(2, 3), "n": 3, "none": None}.items()}
    assert values["out_dtype"] == "torch.float16" and values["x"] == "2x3 float32" and values["n"] == 3
    assert json.loads(json.dumps(values)) == values
