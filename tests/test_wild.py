"""Kernel files as people write them (tests/wild/, unmodified): imported without a GPU, autotune unwrapped,
launched through their own wrappers, traced, and optimized with predictions from that trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"
H100 = get_model("h100")


def _tutorial(m=256, n=256, k=64, config=None):
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    return open_user_kernel(
        str(WILD / "tutorial_matmul.py"), H100,
        config=config if config is not None else {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
        inputs=Inputs(sizes={"m": m, "n": n, "k": k}, seed=3, task=load_task("matmul")),
    )


def test_files_import_on_cpu_with_driver_queries_and_autotune_unwrapped():
    from swizzlelab.userkernel import load_kernel_file

    for name in ("tutorial_matmul", "persistent_matmul", "attention_fwd", "row_sum"):
        kfile = load_kernel_file(WILD / f"{name}.py", H100)
        assert kfile.shim is not None and kfile.shim.backend == "cuda"
    kfile = load_kernel_file(WILD / "tutorial_matmul.py", H100)
    kernel = kfile.kernels["matmul_kernel"]
    assert kernel.wrappers == ("Autotuner",)
    # is_cuda() answered for the H100 target: the CUDA configs were taken, not the HIP ones
    assert len(kernel.autotune_configs) == 5
    assert kernel.autotune_configs[0].kwargs["BLOCK_SIZE_N"] == 128
    assert "GROUP_SIZE_M" in kernel.constexprs
    # an AMD target gets the file's HIP configs
    amd = load_kernel_file(WILD / "tutorial_matmul.py", get_model("mi300x"))
    assert len(amd.kernels["matmul_kernel"].autotune_configs) == 2
    # the real driver is restored after the import
    import triton

    assert type(triton.runtime.driver._active).__name__ != "InterpreterDriver"


def test_config_choice_and_errors():
    from swizzlelab.userkernel import choose, load_kernel_file, parse_config_option

    kernel = load_kernel_file(WILD / "tutorial_matmul.py", H100).kernels["matmul_kernel"]
    first = choose(kernel, {})
    assert first.values["BLOCK_SIZE_M"] == 128 and first.values["num_warps"] == 8
    assert "autotune config 0 of 5" in first.source
    second = choose(kernel, parse_config_option("BLOCK_SIZE_M=32,GROUP_SIZE_M=4"), autotune_index=2)
    assert second.values["BLOCK_SIZE_M"] == 32 and second.values["GROUP_SIZE_M"] == 4
    assert second.values["BLOCK_SIZE_N"] == 256  # from config 2
    with pytest.raises(UserError, match="no such parameter"):
        choose(kernel, {"BLOCK_M": 64})
    with pytest.raises(UserError, match="NAME=VALUE"):
        parse_config_option("BLOCK_SIZE_M")


def test_an_amd_kernels_compile_options_are_passed_only_to_a_backend_that_knows_them():
    """rocm_gemm.py's autotune configs carry waves_per_eu/kpack/matrix_instr_nonkdim: AMD's Triton backend takes
    them, NVIDIA's refuses them ("Keyword argument waves_per_eu was specified but unrecognised", seen on an
    H200); the kernel itself runs on either."""
    from triton.backends.compiler import GPUTarget

    from swizzlelab.userkernel import choose, load_kernel_file
    from swizzlelab.userkernel.config import backend_options

    kernel = load_kernel_file(WILD / "rocm_gemm.py", get_model("mi300x")).kernels["matmul_kernel"]
    choice = choose(kernel, {}, autotune_index=1)
    assert {"waves_per_eu", "kpack", "matrix_instr_nonkdim"} <= set(choice.extra)
    cuda, hip = backend_options(GPUTarget("cuda", 90, 32)), backend_options(GPUTarget("hip", "gfx942", 64))
    assert "num_warps" in cuda and "num_warps" in hip
    assert not set(choice.extra) & cuda and set(choice.extra) <= hip


def test_tutorial_matmul_trace_and_own_order_from_the_kernel_itself():
    from swizzlelab.swizzle import family, to_permutation

    uk = _tutorial()
    assert uk.site_lines() == "lines 63-71" and uk.site.how == "found automatically"
    assert "swizzle site: lines 63-71 (found automatically), yielding pid_m, pid_n" in uk.describe()
    assert uk.site.outputs == ("pid_m", "pid_n")
    assert set(uk.marked.hoisted) == {"num_pid_m", "num_pid_n", "num_pid_in_group"}
    traced = uk.trace()
    assert traced.order.grid == (8, 8) and traced.n_programs == 64
    assert [t.name for t in traced.trace.tensors] == ["a_ptr", "b_ptr", "c_ptr"]
    # the kernel's own order is grouped with GROUP_SIZE_M=8, found by evaluating its own site
    grouped = to_permutation(family("grouped", GROUP_M=8), (8, 8))
    assert np.array_equal(traced.order.perm, grouped.perm)
    # each tile reads its 32 rows of A and 32 columns of B over K=64 (2 steps of 32) and stores its C tile
    tile = 9  # pid_m=1, pid_n=1
    lo, hi = traced.trace.tile_step_ptr[tile], traced.trace.tile_step_ptr[tile + 1]
    assert hi - lo == 2
    writes = traced.trace.is_write[traced.trace.step_ptr[lo]:traced.trace.step_ptr[hi]]
    assert writes.sum() == 32 * (32 * 2 // 128 or 1)  # 32 rows of 64 bytes: one line each


def test_tutorial_matmul_candidate_spliced_into_marked_copy_computes_the_same_product():
    import torch

    from swizzlelab.swizzle import family

    uk = _tutorial(m=128, n=96, k=64)
    own = uk.launcher(None)
    other = uk.launcher(family("column_major"))
    assert torch.equal(own, other)
    a, b = uk.launcher.arguments["a"], uk.launcher.arguments["b"]
    assert torch.allclose(own.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
    # the file itself is untouched: its module still holds the autotuner
    assert type(uk.kfile.module.matmul_kernel).__name__ == "Autotuner"


def test_tutorial_matmul_optimized_with_predictions_from_its_trace(tmp_path):
    from swizzlelab.optimize.loop import Options, run
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.sim import simulate

    uk = _tutorial()
    problem = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    result = run(problem, Options(out_dir=tmp_path, budget=3, screen_s=20, workers=1), measurer=None)
    baseline = result.state.baseline
    assert baseline.status == "evaluated" and "num_pid_in_group" in baseline.formula
    direct = simulate(uk.trace().trace, uk.trace().order.perm, H100, occupancy=1)
    assert baseline.prediction.dram_read_bytes == int(direct.dram_read_bytes)
    assert baseline.prediction.l2_hit_rate == pytest.approx(direct.l2_hit_rate)
    assert baseline.prediction.kind == "predicted (model H100-SXM)"
    records = [json.loads(line) for line in (tmp_path / "iterations.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if r.get("type") == "iteration" and r["status"] == "evaluated"]
    assert len(evaluated) >= 3
    log = (tmp_path / "log.txt").read_text()
    assert "swizzle site: lines 63-71 (found automatically)" in log and "traced the kernel itself" in log


def test_row_sum_site_found_and_optimized(tmp_path):
    from swizzlelab.optimize.loop import Options, run
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    uk = open_user_kernel(str(WILD / "row_sum.py"), H100,
                          inputs=Inputs(tensors=(parse_tensor_spec("x=float32[R,C]"),), sizes={"R": 64, "C": 300}))
    assert uk.site_lines() == "line 16" and uk.site.outputs == ("pid",)
    assert "signature's defaults" in uk.choice.source
    traced = uk.trace()
    assert traced.order.grid == (16,)  # BLOCK_ROWS=4 from the signature's default
    assert np.array_equal(traced.order.perm, np.arange(16))
    problem = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    result = run(problem, Options(out_dir=tmp_path, budget=2, screen_s=10, workers=1), measurer=None)
    # no reuse between programs: every order reads each byte of x once, and the run says it cannot tell them apart
    reads = {a.prediction.dram_read_bytes for a in result.state.attempts if a.prediction}
    assert len(reads) == 1
    from swizzlelab.optimize.report import separation

    separates, line = separation(result.state)
    assert separates is False and line.startswith("the predictions do not separate the orders")


def test_persistent_matmul_iterations_split_into_tiles():
    from swizzlelab.swizzle import family, to_permutation
    from swizzlelab.userkernel import Inputs, open_user_kernel
    from swizzlelab.tasks import load_task

    uk = open_user_kernel(str(WILD / "persistent_matmul.py"), H100,
                          inputs=Inputs(sizes={"m": 2048, "n": 1280, "k": 64}, task=load_task("matmul")))
    assert uk.site.loop_var == "tile_id" and uk.site_lines() == "lines 33-37"
    traced = uk.trace()
    # 16 x 10 = 160 tiles on min(132 SMs, 160) programs: 28 programs run two tiles
    assert traced.n_programs == 132 and traced.order.grid == (16, 10)
    assert sum(len(i) for i in traced.order.iterations) == 160
    grouped = to_permutation(family("grouped", GROUP_M=8), (16, 10))
    assert np.array_equal(traced.order.perm, grouped.perm)
    steps = np.diff(traced.trace.tile_step_ptr)
    assert (steps == 1).all()  # one K step per tile, its store in the same step


def test_zero_ranked_is_an_error_naming_the_commonest_reason():
    from swizzlelab.optimize.search import SearchProposer

    rejected = []
    proposer = SearchProposer(grid=(8, 8), n_domains=1, screen=lambda text: (None, None, None, "the reason X"),
                              rejected=lambda spec, text, reason: rejected.append(reason))
    with pytest.raises(UserError, match=r"0 of \d+ candidate orders could be ranked; the most common reason .*the reason X"):
        proposer.propose([], None)
    assert rejected and set(rejected) == {"the reason X"}


def test_cli_optimize_wild_file_prints_site_and_config(tmp_path):
    from typer.testing import CliRunner

    from swizzlelab.cli.main import app

    result = CliRunner().invoke(app, [
        "optimize", "--kernel", str(WILD / "row_sum.py"), "--tensor", "x=float32[R,C]", "--size", "R=32",
        "--size", "C=256", "--budget", "1", "--screen-s", "5", "--occupancy", "1", "--out", str(tmp_path / "o"),
    ])
    assert result.exit_code == 0, result.output
    assert "swizzle site: line 16 (found automatically)" in result.output
    assert "no GPU here" in result.output and "traced the kernel itself" in result.output
    bad = CliRunner().invoke(app, ["optimize", "--kernel", str(WILD / "row_sum.py"), "--tensor", "x=float32[R]",
                                   "--out", str(tmp_path / "p")])
    # the CLI entry point turns this UserError into a one-line message and exit 2
    assert isinstance(bad.exception, UserError) and "--size R=N" in str(bad.exception)


def _assert_predicted_from_trace(baseline, traced):
    """The baseline's prediction is the simulator run on the trace of the user's kernel in its own order."""
    from swizzlelab.sim import simulate

    direct = simulate(traced.trace, traced.order.perm, H100, occupancy=1)
    assert baseline.prediction.dram_read_bytes == int(direct.dram_read_bytes)
    assert baseline.prediction.l2_hit_rate == pytest.approx(direct.l2_hit_rate)
    assert baseline.prediction.kind == "predicted (model H100-SXM)"


def _attention(n_ctx=512, heads=4):
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    tensors = tuple(parse_tensor_spec(f"{n}=float16[Z,H,N,D]") for n in "qkv")
    return open_user_kernel(str(WILD / "attention_fwd.py"), H100,
                            inputs=Inputs(tensors=tensors, scalars={"sm_scale": 0.125},
                                          sizes={"Z": 1, "H": heads, "N": n_ctx, "D": 64}))


def test_attention_2d_launch_site_traced_and_optimized(tmp_path):
    import torch

    from swizzlelab.optimize.loop import Options, run
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.swizzle import family

    uk = _attention()
    assert uk.site.outputs == ("start_m", "off_hz") and uk.marked.launch_rank == 2
    assert uk.site_lines() == "lines 44-45"
    traced = uk.trace()
    # launch (4 query blocks, 4 heads), axis 0 dispatched fastest: tile (start_m, off_hz) = launch (p0, p1)
    assert traced.launch_grid == (4, 4, 1) and traced.order.grid == (4, 4)
    assert list(traced.order.perm[:5]) == [0, 4, 8, 12, 1]
    assert [t.name for t in traced.trace.tensors] == ["Q", "K", "V", "Out"]
    # each program reads all of its head's K and V: 512 rows x 128 bytes each, plus its Q block
    scenario = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    own = scenario.check(scenario.default_order())
    assert own.proof.is_bijection and np.array_equal(own.perm, traced.order.perm)
    # an order spliced into the kernel copy computes the same output as the kernel's own
    assert torch.equal(uk.launcher(None), uk.launcher(family("grouped", GROUP_M=2)))
    result = run(scenario, Options(out_dir=tmp_path, budget=3, screen_s=20, workers=1), measurer=None)
    assert result.state.baseline.status == "evaluated"
    assert sum(a.status == "evaluated" for a in result.state.attempts) >= 3
    _assert_predicted_from_trace(result.state.baseline, traced)


def test_persistent_matmul_optimized_inside_its_tile_loop(tmp_path):
    import torch

    from swizzlelab.optimize.loop import Options, run
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.swizzle import family
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    small = open_user_kernel(str(WILD / "persistent_matmul.py"), H100,
                             inputs=Inputs(sizes={"m": 512, "n": 384, "k": 64}, task=load_task("matmul")))
    assert "swz_launch = tile_id" in small.marked.kernel_source
    assert torch.equal(small.launcher(None), small.launcher(family("column_major")))
    uk = open_user_kernel(str(WILD / "persistent_matmul.py"), H100,
                          inputs=Inputs(sizes={"m": 2048, "n": 1280, "k": 64}, task=load_task("matmul")))
    scenario = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    own = scenario.check(scenario.default_order())
    assert np.array_equal(own.perm, uk.trace().order.perm)
    result = run(scenario, Options(out_dir=tmp_path, budget=2, screen_s=20, workers=1), measurer=None)
    assert sum(a.status == "evaluated" for a in result.state.attempts) >= 2
    _assert_predicted_from_trace(result.state.baseline, uk.trace())


NO_GRID_NAMES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_tiles(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK)
    pid_n = pid % tl.cdiv(N, BLOCK)
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = rows[:, None] * N + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def copy(x):
    y = torch.empty_like(x)
    M, N = x.shape
    copy_tiles[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](x, y, M, N, BLOCK=16)
    return y
'''


def test_every_rejection_logged_and_zero_ranked_names_the_reason(tmp_path):
    """A kernel that never names num_pid_m/num_pid_n: every family order needs them, so nothing can be ranked;
    the run stops with the commonest reason and each rejection is in iterations.jsonl."""
    from swizzlelab.optimize.loop import Options, run
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    path = tmp_path / "copy_tiles.py"
    path.write_text(NO_GRID_NAMES)
    uk = open_user_kernel(str(path), H100, site="9-11",
                          inputs=Inputs(tensors=(parse_tensor_spec("x=float32[M,N]"),), sizes={"M": 64, "N": 64}))
    scenario = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    assert scenario.grid == (4, 4)
    with pytest.raises(UserError, match=r"0 of \d+ candidate orders could be ranked; the most common reason .*num_pid_"):
        run(scenario, Options(out_dir=tmp_path / "o", budget=2, screen_s=10, workers=1), measurer=None)
    records = [json.loads(line) for line in (tmp_path / "o" / "iterations.jsonl").read_text().splitlines()]
    rejected = [r for r in records if r.get("type") == "rejected"]
    assert len(rejected) > 5 and all(r["reason"] and r["spec"] for r in rejected)
    log = (tmp_path / "o" / "log.txt").read_text()
    assert "candidate(s) rejected before ranking" in log and "0 of" in log


def test_inputs_that_do_not_fit_are_refused_before_allocation():
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    with pytest.raises(UserError, match="GiB available: use smaller --size"):
        open_user_kernel(str(WILD / "row_sum.py"), H100,
                         inputs=Inputs(tensors=(parse_tensor_spec("x=float32[R,C]"),), sizes={"R": 2**20, "C": 2**20}))


def test_site_option_overrides_the_finder():
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    # only the program-id line, not the remap block: a 1-D site whose candidates run before the kernel's own remap
    uk = open_user_kernel(str(WILD / "tutorial_matmul.py"), H100, site="63-63",
                          config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
                          inputs=Inputs(sizes={"m": 128, "n": 128, "k": 32}, task=load_task("matmul")))
    assert uk.site.how == "given with --site" and uk.site.outputs == ("pid",)
    traced = uk.trace()
    assert traced.order.grid == (16,) and np.array_equal(traced.order.perm, np.arange(16))


def test_harness_correctness_of_orders_on_a_user_kernel():
    """What the GPU measurer runs before timing an order: the harness's check, with the user kernel standing in
    for a task; an order that computes one tile only leaves the rest unwritten and fails."""
    from swizzlelab.harness.correctness import check_correctness
    from swizzlelab.scenario import scenario_from_user_kernel
    from swizzlelab.swizzle import family, parse_formula

    uk = _tutorial(m=96, n=64, k=64)
    scenario = scenario_from_user_kernel(uk, "h100", occupancy=1, gpu_name="")
    task = scenario.task
    good = check_correctness(task, lambda data: task.custom_kernel(data, family("column_major")), scenario.case,
                             recheck=False)
    assert good.passed, good.runs[0].message
    one_tile = parse_formula("pid = tl.program_id(0)\npid_m = pid * 0\npid_n = pid * 0\n")
    bad = check_correctness(task, lambda data: task.custom_kernel(data, one_tile), scenario.case, recheck=False)
    assert not bad.passed and "differ from the kernel's own order" in bad.runs[0].message


def test_launch_option_names_the_wrapper():
    from swizzlelab.userkernel import Inputs, load_kernel_file, parse_tensor_spec, resolve_wrapper

    kfile = load_kernel_file(WILD / "row_sum.py", H100)
    kernel = kfile.kernels["row_sum_kernel"]
    assert resolve_wrapper(kfile, None, kernel).__name__ == "row_sum"  # the one function that launches it
    assert resolve_wrapper(kfile, "row_sum", kernel).__name__ == "row_sum"
    assert resolve_wrapper(kfile, f"{WILD / 'row_sum.py'}:row_sum", kernel).__name__ == "row_sum"
    with pytest.raises(UserError, match="has no function 'rowsum'"):
        resolve_wrapper(kfile, "rowsum", kernel)
    from swizzlelab.userkernel import build_arguments

    with pytest.raises(UserError, match=r"row_sum\(x\) needs x: give each tensor with --tensor"):
        build_arguments(resolve_wrapper(kfile, None, kernel), Inputs(), "cpu")
    args = build_arguments(resolve_wrapper(kfile, None, kernel),
                           Inputs(tensors=(parse_tensor_spec("x=float32[R,C]"),), sizes={"R": 3, "C": 5}, seed=7), "cpu")
    again = build_arguments(resolve_wrapper(kfile, None, kernel),
                            Inputs(tensors=(parse_tensor_spec("x=float32[R,C]"),), sizes={"R": 3, "C": 5}, seed=7), "cpu")
    assert tuple(args["x"].shape) == (3, 5) and bool((args["x"] == again["x"]).all()) and float(args["x"].abs().sum()) > 0



# ------------------------------------------------------------------ which autotune config a user kernel runs with

AUTOTUNED = Path(__file__).parent / "fixtures" / "autotuned_matmul.py"


def _autotuned(m=64, n=64, k=32, **options):
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec

    inputs = Inputs(tensors=(parse_tensor_spec("a=float16[M,K]"), parse_tensor_spec("b=float16[K,N]")),
                    sizes={"M": m, "N": n, "K": k}, seed=1)
    return open_user_kernel(str(AUTOTUNED), H100, inputs=inputs, **options)


def test_autotuned_kernel_without_a_gpu_runs_its_first_config_and_says_why():
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    uk = open_user_kernel(str(WILD / "tutorial_matmul.py"), H100, own_autotune=True,
                          inputs=Inputs(sizes={"m": 128, "n": 128, "k": 64}, seed=3, task=load_task("matmul")))
    assert uk.choice.config_index == 0 and uk.request.autotune_index == 0
    assert uk.choice.values["BLOCK_SIZE_N"] == 128 and uk.choice.values["num_warps"] == 8  # config 0's
    assert ("(autotune config 0 of 5 (BLOCK_SIZE_M=128,BLOCK_SIZE_N=128,BLOCK_SIZE_K=64,GROUP_SIZE_M=8,num_warps=8,"
            "num_stages=3) (the first: autotuning needs a GPU; choose others with --config/--autotune-config))"
            ) in uk.choice.describe()


def test_autotune_config_and_config_options_still_choose_without_autotuning():
    given = _autotuned(autotune_index=2, own_autotune=True)
    assert given.choice.config_index == 2 and given.request.autotune_index == 2
    assert given.choice.values["BLOCK_M"] == 32 and given.choice.values["num_warps"] == 2
    assert "autotune config 2 of 3 (BLOCK_M=32," in given.choice.source
    assert "(given with --autotune-config; choose others" in given.choice.source
    overridden = _autotuned(config={"GROUP_M": 2}, own_autotune=True)
    assert overridden.choice.config_index == 0 and overridden.choice.values["GROUP_M"] == 2
    assert "with --config the kernel's @triton.autotune is not run" in overridden.choice.source
    assert overridden.choice.source.endswith("overridden by --config")
    with pytest.raises(UserError, match="has 3 configs"):
        _autotuned(autotune_index=3)


def test_own_autotune_reads_the_config_the_kernels_autotuner_picked_for_the_traced_launch():
    """The file's own Autotuner runs (here under the interpreter, with the file's wall-clock benchmarker) through
    a wrapper that launches a warm-up at another key first: the index is the one Triton cached for the launch with
    the most programs, and the autotuner is left as it was."""
    from swizzlelab.userkernel.autotune import _autotuner, own_pick
    from swizzlelab.userkernel.launch import running

    uk = _autotuned(m=64, launch="matmul_after_warmup")
    tuner = _autotuner(uk.kernel.attr)
    assert tuner is uk.kfile.module.matmul_kernel and not tuner.cache

    def run():
        with running(uk.kfile, H100):
            uk.launcher.wrapper(**uk.launcher.arguments)

    tuned = own_pick(uk.kernel, run, "matmul_after_warmup(...)")
    assert len(tuner.cache) == 2  # the warm-up's key (M=16) and the traced launch's (M=64)
    traced_key = next(key for key in tuner.cache if key[0] == 64)
    assert tuned.index == tuner.configs.index(tuner.cache[traced_key])
    assert tuned.seconds is not None and tuned.seconds > 0
    assert tuned.why.startswith(": chosen by the kernel's @triton.autotune on the CPU (Triton interpreter) in ")
    assert "(measured; 3 of 3 configs timed; choose others with --config/--autotune-config)" in tuned.why
    assert "run" not in vars(tuner)  # its own run method again


@pytest.mark.gpu
def test_on_a_gpu_the_config_is_the_one_the_kernels_own_autotuner_picks():
    """On a GPU with neither --config nor --autotune-config, a timing command runs the config the kernel's own
    @triton.autotune picks: the same one a fresh copy of the file's Autotuner, called directly, picks (config 0,
    16x16 tiles on one warp, is deliberately the slowest, so the pick is not the default)."""
    import importlib.util
    import sys

    import torch

    uk = _autotuned(m=2048, n=2048, k=2048, own_autotune=True)
    assert not uk.kernel.interpreted
    spec = importlib.util.spec_from_file_location("autotuned_matmul_direct", AUTOTUNED)
    direct = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = direct  # as an import would: Triton reads a kernel's globals through its module
    spec.loader.exec_module(direct)
    a, b = uk.launcher.arguments["a"], uk.launcher.arguments["b"]
    direct.matmul(a, b)
    expected = direct.matmul_kernel.configs.index(direct.matmul_kernel.best_config)
    assert expected != 0
    assert uk.choice.config_index == expected and uk.request.autotune_index == expected
    assert ": chosen by the kernel's @triton.autotune on " in uk.choice.source
    assert "(measured; 3 of 3 configs timed" in uk.choice.source
    # the launcher forces that config: its output is the product
    out = uk.launcher(None)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.5, rtol=2e-2)
    # the choice was made once: a forced launch does not go through the autotuner again
    assert "run" not in vars(uk.kfile.module.matmul_kernel)
