"""What a tester saw fail on published kernel files (issue 44), one test each: tracing when kernels run
compiled, Config.pre_hook and @triton.heuristics, an autograd Function's apply as the launcher, tl.assume under
the interpreter, in-kernel constexprs, a remap helper called twice, the file's own folder on sys.path, task
inputs with --tensor/--arg, import errors with FILE:LINE, tests and benchmarks at import, lists of tensors, and
the occupancy of the compiled kernel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from swizzlelab.cli.main import app
from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.hw import get_model, nvidia_blocks_per_sm, resolve_target
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"
H100 = get_model("h100")


def _matmul_task_kernel(interpret: bool | None = None):
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    return open_user_kernel(
        str(WILD / "tutorial_matmul.py"), H100, interpret=interpret,
        config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
        inputs=Inputs(sizes={"m": 96, "n": 64, "k": 64}, seed=3, task=load_task("matmul")),
    )


def test_compiled_kernels_are_traced_by_an_interpreted_child(monkeypatch):
    """The GPU path on a CPU: the file imported with the interpreter off (JITFunctions, as on an H100 without
    TRITON_INTERPRET). Tracing must not launch those: a child process imports the file interpreted and traces
    it, and gets the trace this process gets when it interprets."""
    compiled = _matmul_task_kernel(interpret=False)
    assert type(compiled.kernel.jit_fn).__name__ == "JITFunction"
    assert "child process" in compiled.trace_method
    in_child = compiled.trace()
    interpreted = _matmul_task_kernel()
    assert interpreted.kernel.interpreted and "this process" in interpreted.trace_method
    here = interpreted.trace()
    assert in_child.launch_grid == here.launch_grid == (6, 1, 1)
    assert np.array_equal(in_child.order.perm, here.order.perm)
    assert np.array_equal(in_child.trace.lines, here.trace.lines) and in_child.trace.lines.size > 0


def test_occupancy_from_the_kernel_compiled_without_a_gpu():
    from swizzlelab.scenario import user_kernel_occupancy
    from swizzlelab.userkernel.resources import kernel_resources

    user_kernel = _matmul_task_kernel()
    resources, why = kernel_resources(user_kernel, None)
    assert resources is not None, why
    assert resources.num_warps == 8 and resources.n_regs > 0 and resources.shared_bytes > 0
    occupancy = user_kernel_occupancy(user_kernel, resolve_target("h100"))
    assert occupancy.programs == nvidia_blocks_per_sm(resources.n_regs, resources.shared_bytes, 8)
    assert "compiled kernel's resources" in occupancy.text() and "without a GPU" in occupancy.text()
    # no register model for an AMD target: said to be assumed
    assumed = user_kernel_occupancy(user_kernel, resolve_target("mi300x"))
    assert assumed.programs == 1 and "(assumed:" in assumed.text()


def _attention(warp_specialize: bool, launch: str | None = None):
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    tensors = tuple(parse_tensor_spec(f"{n}=float16[Z,H,S,D]") for n in "qkv")
    return open_user_kernel(
        f"{WILD / 'triton_06_fused_attention.py'}:_attn_fwd", H100, launch=launch, config={"BLOCK_M": 64, "BLOCK_N": 32},
        inputs=Inputs(tensors=tensors, scalars={"causal": False, "sm_scale": 0.5, "warp_specialize": warp_specialize},
                      sizes={"Z": 1, "H": 2, "S": 128, "D": 64}))


def test_config_pre_hook_and_autograd_apply_launcher():
    """Tutorial 06: `attention = _attention.apply` launches `_attn_fwd` through host TensorDescriptors whose
    block shape the config's pre_hook sets (without it: "Descriptor block shape must have at least 16 bytes")."""
    user_kernel = _attention(warp_specialize=False)
    assert user_kernel.launcher.wrapper.__name__ == "attention" and user_kernel.launcher.wrapper.positional
    assert user_kernel.choice.pre_hook is user_kernel.kfile.module._host_descriptor_pre_hook
    launched = user_kernel.launcher.probe()
    assert type(launched["desc_q"]).__name__ == "TensorDescriptor"
    out = user_kernel.launcher(None)
    q, k, v = (user_kernel.launcher.arguments[n].float() for n in "qkv")
    expected = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1) @ v
    assert torch.allclose(out.float(), expected, atol=2e-2)
    assert _attention(warp_specialize=True, launch="attention").launcher.wrapper.__name__ == "attention"


def test_heuristics_computed_for_every_launch():
    """ROCm's gemm.py computes EVEN_K with @triton.heuristics: launched without it the kernel misses a
    required argument."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    def gemm(k: int):
        return open_user_kernel(
            str(WILD / "rocm_gemm.py"), H100, config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
            inputs=Inputs(tensors=tuple(parse_tensor_spec(t) for t in ("a=float16[M,K]", "b=float16[K,N]", "c=float16[M,N]")),
                          scalars={"a_scale": None, "b_scale": None}, sizes={"M": 64, "N": 64, "K": k}))

    even, odd = gemm(64), gemm(48)
    assert even.kernel.wrappers == ("Autotuner", "Heuristics")
    assert even.launcher.probe()["EVEN_K"] is True and odd.launcher.probe()["EVEN_K"] is False
    data = odd.launcher.arguments
    odd.launcher(None)
    assert torch.allclose(data["c"].float(), data["a"].float() @ data["b"].float(), atol=5e-2)


ASSUMING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def shift(x_ptr, y_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.assume(pid > 0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)


def run(x):
    y = torch.empty_like(x)
    shift[(x.numel() // 8,)](x, y, BLOCK=8)
    return y
'''


def test_assume_is_a_hint_under_the_interpreter(tmp_path):
    """`tl.assume(pid > 0)` is a hint on the GPU (program 0 runs anyway); the interpreter asserted it."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    path = tmp_path / "assuming.py"
    path.write_text(ASSUMING)
    user_kernel = open_user_kernel(str(path), H100, inputs=Inputs(tensors=(parse_tensor_spec("x=float32[32]"),)))
    out = user_kernel.launcher(None)
    assert torch.equal(out, user_kernel.launcher.arguments["x"] + 1)


IN_KERNEL_CONSTEXPR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_tiles(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(0)
    NUM_XCDS: tl.constexpr = 8
    num_pid_m = tl.cdiv(M, BLOCK)
    num_pid_n = tl.cdiv(N, BLOCK)
    pids_per_xcd = (num_pid_m * num_pid_n) // NUM_XCDS
    pid = (pid % NUM_XCDS) * pids_per_xcd + pid // NUM_XCDS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = rows[:, None] * N + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)


def scale(x):
    y = torch.empty_like(x)
    M, N = x.shape
    scale_tiles[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](x, y, M, N, BLOCK=16, GROUP_SIZE_M=2)
    return y
'''


@pytest.mark.parametrize("site", [None, "9-20"])
def test_in_kernel_constexpr_needs_no_config(tmp_path, site):
    """`NUM_XCDS: tl.constexpr = 8` in the kernel body: its value is the kernel's (no --config asked), and
    --site takes lines holding the annotation."""
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.swizzle import family
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    path = tmp_path / "xcd_inside.py"
    path.write_text(IN_KERNEL_CONSTEXPR)
    user_kernel = open_user_kernel(str(path), H100, site=site,
                                   inputs=Inputs(tensors=(parse_tensor_spec("x=float32[M,N]"),), sizes={"M": 128, "N": 128}))
    assert user_kernel.site_lines() == "lines 9-20" and user_kernel.site.outputs == ("pid_m", "pid_n")
    traced = user_kernel.trace()
    assert traced.order.grid == (8, 8)
    scenario = scenario_from_user_kernel(user_kernel, "h100", occupancy=1)
    own = scenario.check(scenario.default_order())
    assert own.proof.is_bijection and np.array_equal(own.perm, traced.order.perm)
    assert torch.equal(user_kernel.launcher(None), user_kernel.launcher(family("column_major")))
    with pytest.raises(UserError, match=r"--config NUM_XCDS: kernel scale_tiles sets NUM_XCDS in its body \(line 10\)"):
        open_user_kernel(str(path), H100, config={"NUM_XCDS": 8}, inputs=Inputs(
            tensors=(parse_tensor_spec("x=float32[M,N]"),), sizes={"M": 128, "N": 128}))


def test_remap_helper_called_twice_is_inlined_and_spliced_at_both_calls():
    """Tutorial 09's persistent kernel computes (pid_m, pid_n) with `_compute_pid` for its loads and again for
    its store: the helper's body is the site, and an order is spliced at both calls."""
    from swizzlelab.swizzle import family
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    user_kernel = open_user_kernel(
        f"{WILD / 'triton_09_persistent_matmul.py'}:matmul_kernel_persistent", H100, launch="matmul_persistent",
        config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
        inputs=Inputs(tensors=tuple(parse_tensor_spec(t) for t in ("a=float16[M,K]", "b=float16[K,N]")),
                      sizes={"M": 128, "N": 96, "K": 64}))
    assert user_kernel.site_lines() == "line 305" and user_kernel.site.loop_var == "tile_id"
    assert [t.index for t in user_kernel.marked.twins] == ["tile_id_c"]
    assert any("runs again at line 326 (over tile_id_c," in line for line in user_kernel.describe())
    a, b = (user_kernel.launcher.arguments[n].float() for n in "ab")
    out = user_kernel.launcher(family("column_major"))
    assert torch.allclose(out.float(), a @ b, atol=5e-2)
    text = user_kernel.file_source(family("column_major"))
    assert text.count("# swizzle: begin") == 1 and "swz_launch = tile_id_c" in text
    assert "def _compute_pid(" in text  # the helper itself stays as written


NOT_INLINABLE = '''
import triton
import triton.language as tl


@triton.jit
def _tile_of(tile_id, n):
    for i in range(1):
        tile_id = tile_id + 0
    return tile_id // n, tile_id % n


@triton.jit
def persistent(x_ptr, N, NUM_SMS: tl.constexpr):
    start = tl.program_id(0)
    for tile_id in range(start, N * N, NUM_SMS):
        pid_m, pid_n = _tile_of(tile_id, N)
        tl.store(x_ptr + pid_m * N + pid_n, 1.0)
'''


def test_helper_message_counts_file_lines(tmp_path):
    from swizzlelab.userkernel import load_kernel_file, site_of

    path = tmp_path / "helper.py"
    path.write_text(NOT_INLINABLE)
    kernel = load_kernel_file(path, H100).kernels["persistent"]
    with pytest.raises(KernelSiteError, match=r"'persistent': line 17 computes the tile ids from tile_id with a call "
                                              r"of _tile_of"):
        site_of(kernel)


def test_sibling_modules_import_from_the_files_folder(tmp_path):
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("BLOCK = 16\n")
    (tmp_path / "add.py").write_text(
        "import torch\nimport triton\nimport triton.language as tl\nfrom utils import BLOCK\n\n\n@triton.jit\n"
        "def add_one(x_ptr, B: tl.constexpr):\n    pid = tl.program_id(0)\n    offs = pid * B + tl.arange(0, B)\n"
        "    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)\n\n\ndef add(x):\n    add_one[(x.numel() // BLOCK,)](x, B=BLOCK)\n"
        "    return x\n")
    from swizzlelab.userkernel import load_kernel_file

    assert load_kernel_file(tmp_path / "add.py", H100).module.BLOCK == 16


def test_import_error_names_file_and_line(tmp_path):
    from swizzlelab.userkernel import load_kernel_file

    path = tmp_path / "broken.py"
    path.write_text("import triton\n\n\ndef helper():\n    return {}['missing']\n\n\nVALUE = helper()\n")
    with pytest.raises(UserError, match=r"importing it failed at broken\.py:5: KeyError: 'missing'"):
        load_kernel_file(path, H100)


def test_import_time_tests_and_benchmarks_are_skipped_and_said():
    """Tutorials 01 and 08 test and benchmark themselves at module level (not under __main__): those
    statements are skipped with a note, and what they print does not reach stdout."""
    from swizzlelab.userkernel import load_kernel_file

    notes = load_kernel_file(WILD / "triton_01_vector_add.py", H100).notes
    assert any("`output_triton = add(x, y)` skipped: it launches kernel add_kernel at import" in n for n in notes)
    assert any("benchmark.run(" in n and "runs a benchmark" in n for n in notes)
    notes = load_kernel_file(WILD / "triton_08_grouped_gemm.py", H100).notes
    assert any("tri_out = group_gemm_fn" in n for n in notes) and len(notes) == 5
    result = CliRunner().invoke(app, ["simulate", "--kernel", str(WILD / "triton_01_vector_add.py"), "--tensor",
                                      "x=float32[N]", "--tensor", "y=float32[N]", "--size", "N=2048", "--json",
                                      "--occupancy", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["grid"] == [2]  # nothing the file prints precedes the JSON


def test_missing_package_imports_are_skipped_until_used():
    """applied-ai's fused MoE imports vLLM's custom ops, which only its moe_align_block_size uses."""
    from swizzlelab.userkernel import load_kernel_file

    kfile = load_kernel_file(WILD / "applied_ai_fused_moe.py", H100)
    assert any("from vllm._C import ops" in n and "ModuleNotFoundError" in n for n in kfile.notes)
    assert "fused_moe_kernel" in kfile.kernels and "invoke_fused_moe_kernel" in kfile.functions


def test_lists_of_tensors_launch_and_trace_through_their_pointer_table():
    """Tutorial 08 launches its grouped GEMM through `group_gemm_fn(group_A, group_B)`, lists of tensors whose
    addresses the kernel reads from a pointer table: they launch (any order, the same products), and the trace
    resolves the loaded pointers to the listed tensors (and the C tensors the launcher makes); the derivation
    falls back to interpreting every program with a one-line reason, and equals that full interpretation."""
    from swizzlelab.swizzle import parse_formula
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    spec = [parse_tensor_spec("group_A=[float16[128,32],float16[64,64]]"),
            parse_tensor_spec("group_B=[float16[32,64],float16[64,96]]")]
    user_kernel = open_user_kernel(
        f"{WILD / 'triton_08_grouped_gemm.py'}:grouped_matmul_kernel", H100, launch="group_gemm_fn",
        config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "NUM_SM": 4},
        inputs=Inputs(tensors=tuple(spec)))
    assert user_kernel.site_lines() == "line 119" and user_kernel.site.outputs == ("tile_idx",)
    reverse = parse_formula("pid = tl.num_programs(0) - 1 - tl.program_id(0)\n")
    own, reordered = user_kernel.launcher(None), user_kernel.launcher(reverse)
    for a, b, got, other in zip(user_kernel.launcher.arguments["group_A"], user_kernel.launcher.arguments["group_B"],
                                own, reordered):
        assert torch.equal(got, other) and torch.allclose(got.float(), a.float() @ b.float(), atol=5e-2)
    traced = user_kernel.trace()
    names = [t.name for t in traced.trace.tensors]
    assert names[:3] == ["group_a_ptrs", "group_b_ptrs", "group_c_ptrs"]
    assert names[5:] == ["group_A[0]", "group_A[1]", "group_B[0]", "group_B[1]", "group_C[0]", "group_C[1]"]
    assert "the kernel loads addresses from group_a_ptrs, group_b_ptrs, group_c_ptrs" in traced.how.describe()
    assert traced.how.derivation is None and traced.order.grid == (4,)
    # 8 + 6 = 14 tiles on 4 programs; every tile writes its 32 rows of C (32 or 64 bytes each: one line)
    by_name = {t.name: t for t in traced.trace.tensors}
    written = np.unique(traced.trace.lines[traced.trace.is_write])
    c0, c1 = by_name["group_C[0]"], by_name["group_C[1]"]
    assert set(written) == set(range(c0.base_line, c0.base_line + c0.n_lines)) | set(
        range(c1.base_line, c1.base_line + c1.n_lines))
    full = trace_user_kernel(user_kernel.launcher, user_kernel.site, derive=False)
    for key in ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr"):
        assert np.array_equal(getattr(traced.trace, key), getattr(full.trace, key)), key


SCALED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scaled_kernel(a_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) * scale, mask=mask)


def scaled(a, scale):
    out = torch.empty_like(a)
    scaled_kernel[(triton.cdiv(a.numel(), 256),)](a, out, a.numel(), scale, BLOCK=256)
    return out
'''


def test_task_inputs_with_arg_and_tensor_overlay(tmp_path):
    """`optimize/simulate TASK --kernel FILE --arg/--tensor ...`: the task supplies the tensors it names, --arg and
    --tensor add or replace single inputs (either once dropped the task's inputs, and the error sent users to a
    --task these commands lack)."""
    path = tmp_path / "scaled.py"
    path.write_text(SCALED)
    result = CliRunner().invoke(app, ["simulate", "matmul", "--kernel", str(path), "--arg", "scale=2.0", "--size",
                                      "m=64", "--size", "k=64", "--size", "n=64", "--occupancy", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["case"]["a"] == "64x64 float16"
    # --tensor replaces the one input it names; the task still supplies the others
    overlaid = CliRunner().invoke(app, [
        "simulate", "matmul", "--kernel", str(WILD / "tutorial_matmul.py"), "--tensor", "b=float16[64,32]", "--size",
        "m=64", "--size", "k=64", "--size", "n=64", "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32",
        "--occupancy", "1", "--json"])
    assert overlaid.exit_code == 0, overlaid.output
    record = json.loads(overlaid.stdout)
    assert record["case"]["a"] == "64x64 float16" and record["case"]["b"] == "64x32 float16"
    assert record["grid"] == [2, 1]
    missing = CliRunner().invoke(app, ["simulate", "--kernel", str(path), "--arg", "scale=2.0"])
    assert isinstance(missing.exception, UserError)
    assert "scaled(a, scale) needs a" in str(missing.exception) and "the TASK argument" in str(missing.exception)
