"""Every kernel file in tests/wild/ (the published ones unedited below their source header, and those written in
their shape) through `optimize --kernel`, `simulate --kernel` and `eval --kernel --order` on the CPU at small
sizes; every best_kernel.py an optimize run writes is imported and run, and its output compared with the
original file's."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from swizzlelab.cli.main import app
from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

WILD = Path(__file__).parent / "wild"


def _sizes(**sizes: int) -> list[str]:
    return [arg for name, value in sizes.items() for arg in ("--size", f"{name}={value}")]


def _tensors(*specs: str) -> list[str]:
    return [arg for spec in specs for arg in ("--tensor", spec)]


@dataclass(frozen=True)
class Wild:
    """A wild file as a user opens it: the options typed (at most one flag beyond its sizes and inputs), an order
    other than its own, the target, the task (if any), the site lines the run must name and what else it must say
    (twins, the kernel's own names for the tile counts, the device queries answered for the target)."""

    options: list[str]
    order: str
    target: str
    task: str | None = None
    site: str = ""
    says: tuple[str, ...] = ()


W = WILD
PUBLISHED = {
    "matmul": Wild([f"{W / 'triton_03_matmul.py'}", *_sizes(m=96, n=64, k=64),
                    "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"], "column_major", "h100", "matmul",
                   "lines 261-269"),
    "vector_add": Wild([f"{W / 'triton_01_vector_add.py'}", *_tensors("x=float32[N]", "y=float32[N]"), *_sizes(N=4000)],
                       "stride:STRIDE=2", "h100", site="line 44"),
    "attention": Wild([f"{W / 'triton_06_fused_attention.py'}:_attn_fwd",
                       *_tensors("q=float16[Z,H,S,D]", "k=float16[Z,H,S,D]", "v=float16[Z,H,S,D]"),
                       "--arg", "causal=False", "--arg", "sm_scale=0.5", *_sizes(Z=1, H=2, S=128, D=64),
                       "--config", "BLOCK_M=64,BLOCK_N=32"], "grouped:GROUP_M=2", "h100", site="lines 191-192"),
    "persistent": Wild([f"{W / 'triton_09_persistent_matmul.py'}:matmul_kernel_persistent", *_tensors("a=float16[M,K]", "b=float16[K,N]"), *_sizes(M=128, N=96, K=64),
                        "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"], "column_major", "h100",
                       site="line 305", says=("runs again at line 326 (over tile_id_c",)),
    "xcd": Wild([f"{W / 'rocm_xcd_matmul_kernel.py'}", "--launch", f"{W / 'rocm_xcd_launch.py'}:matmul",
                 *_tensors("a=float16[M,K]", "b=float16[K,N]"), *_sizes(M=128, N=256, K=64)], "column_major", "mi300x",
                site="lines 24-48"),
    "heuristics": Wild([f"{W / 'rocm_gemm.py'}", *_tensors("a=float16[M,K]", "b=float16[K,N]", "c=float16[M,N]"),
                        "--arg", "a_scale=None", "--arg", "b_scale=None", *_sizes(M=96, N=64, K=64),
                        "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"], "column_major", "h100",
                       site="lines 81-93"),
    "moe": Wild([f"{W / 'applied_ai_fused_moe.py'}", "--inputs",
                 f"{W / 'moe_inputs.py'}:moe_inputs", *_sizes(M=24, E=4, N=64, K=32, top_k=2, block_m=16)],
                "column_major", "h100", site="lines 74-82"),
    "grouped": Wild([f"{W / 'triton_08_grouped_gemm.py'}:grouped_matmul_kernel", "--launch", "group_gemm_fn",
                     *_tensors("group_A=[float16[64,32],float16[128,64]]", "group_B=[float16[32,96],float16[64,32]]"),
                     "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32,NUM_SM=8"], "stride:STRIDE=2", "h100",
                    site="line 119"),
    # issue 55: the kernels people have beyond Triton's tutorials
    "vllm": Wild([f"{W / 'vllm_triton_scaled_mm.py'}", *_tensors("input=float16[M,K]", "weight=float16[K,N]",
                                                                  "scale_a=float32[1,1]", "scale_b=float32[1,1]"),
                  "--arg", "out_dtype=torch.float16", *_sizes(M=128, N=96, K=64),
                  "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"], "column_major", "h100",
                 site="lines 32-37", says=("tl, triton bound to the installed Triton",
                                           "tiles along pid_m: tl.cdiv(M, BLOCK_SIZE_M)")),
    "torchao": Wild([f"{W / 'torchao_intmm_triton.py'}:matmul_kernel_with_block_pointers", "--inputs",
                     f"{W / 'torchao_inputs.py'}:intmm_inputs", *_sizes(M=128, N=96, K=64)], "column_major", "h100",
                    site="lines 114-122"),
    "torchao_scaled": Wild([f"{W / 'torchao_intmm_triton.py'}:scaled_matmul_kernel_with_block_pointers", "--inputs",
                            f"{W / 'torchao_inputs.py'}:intmm_inputs", *_sizes(M=128, N=96, K=64)], "column_major",
                           "h100", site="lines 212-221", says=("tiles along pid_m = grid_m; tiles along pid_n = grid_n",)),
    "inductor": Wild([f"{W / 'inductor_mm_output_code.py'}"], "column_major", "h100", site="lines 103-112",
                     says=("the one with the most programs (8; others: triton_tem_fused_mm_relu_1 (4))",
                           "tiles along pid_m = grid_m", "as call() launches it at line 295")),
    "streamk_amd": Wild([f"{W / 'tritonbench_stream_k.py'}:streamk_amd_gemm", *_tensors("a=float16[M,K]", "b=float16[K,N]"),
                         *_sizes(M=128, N=96, K=64), "--config", "BLOCK_M=32,BLOCK_N=32,BLOCK_K=32"], "column_major",
                        "mi300x", site="lines 134-138",
                        says=("is_hip_mi300() = True answered for the target MI300X",
                              "the same remap runs again at lines 216-220 (over tile_id")),
    "streamk_cuda": Wild([f"{W / 'tritonbench_stream_k.py'}:streamk_cuda_gemm", *_tensors("a=float16[M,K]", "b=float16[N,K]"),
                          *_sizes(M=128, N=96, K=64), "--config", "BLOCK_M=32,BLOCK_N=32,BLOCK_K=32"], "column_major",
                         "h100", site="lines 516-520",
                         says=("the remap of pid further down", "the same remap runs again at lines 572-576 (over curr_tile",
                               "tiles along tile_m = num_tile_m")),
    "batch_invariant": Wild([f"{W / 'batch_invariant_ops.py'}:matmul_kernel_persistent",
                             *_tensors("a=float16[M,K]", "b=float16[K,N]"), *_sizes(M=128, N=96, K=64),
                             "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"], "column_major", "h100",
                            site="line 84", says=("runs again at line 112 (over tile_id_c",
                                                  "torch.accelerator.current_accelerator() = cuda",
                                                  "launch grid (12, 1, 1)")),
    "liger": Wild([f"{W / 'liger_mm_int8int2.py'}", *_tensors("a=int8[M,K]", "b=uint8[K4,N]"),
                   *_sizes(M=96, N=64, K=128, K4=32), "--autotune-config", "14"], "column_major", "h100",
                  site="lines 244-261"),
    # the files written for swizzlelab in the shape of published ones
    "tutorial_shape": Wild([f"{W / 'tutorial_matmul.py'}", *_tensors("a=float16[M,K]", "b=float16[K,N]"),
                            *_sizes(M=96, N=64, K=64), "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"],
                           "column_major", "h100", site="lines 63-71"),
    "attention_shape": Wild([f"{W / 'attention_fwd.py'}", *_tensors("q=float16[Z,H,N,D]", "k=float16[Z,H,N,D]",
                                                                     "v=float16[Z,H,N,D]"),
                             "--arg", "sm_scale=0.125", *_sizes(Z=1, H=2, N=256, D=64)], "grouped:GROUP_M=2", "h100",
                            site="lines 44-45"),
    "persistent_shape": Wild([f"{W / 'persistent_matmul.py'}", *_sizes(m=256, n=192, k=64)], "column_major", "h100",
                             "matmul", site="lines 33-37"),
    "row_sum": Wild([f"{W / 'row_sum.py'}", *_tensors("x=float32[R,C]"), *_sizes(R=64, C=300)], "stride:STRIDE=2",
                    "h100", site="line 16"),
}
# the --inputs / --launch helpers and the script that made the Inductor output, not kernel files themselves
HELPERS = {"moe_inputs.py", "rocm_xcd_launch.py", "torchao_inputs.py", "make_inductor_output.py"}


def _invoke(args: list[str]):
    result = CliRunner().invoke(app, args)
    if isinstance(result.exception, UserError):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def _open(options: list[str], target: str, kernel: str | None = None, task: str | None = None):
    """The user kernel the CLI options describe (as the CLI opens it), optionally another file's."""
    from swizzlelab.cli.userkernel import KernelOptions, open_from_options

    spec, rest = options[0], options[1:]
    pairs = list(zip(rest[::2], rest[1::2]))
    take = lambda flag: [v for f, v in pairs if f == flag]  # noqa: E731
    launch = take("--launch")
    inputs = take("--inputs")
    autotune = take("--autotune-config")
    options = KernelOptions(task=task, config=take("--config"), launch=launch[0] if launch else None,
                            tensor=take("--tensor"), arg=take("--arg"), size=take("--size"),
                            inputs=inputs[0] if inputs else None,
                            autotune_config=int(autotune[0]) if autotune else None)
    return open_from_options(kernel or spec, get_model(target), options)


def _outputs(user_kernel) -> tuple:
    """What the kernel's own order produces on the seeded inputs (returned and written in place), run as the
    checks run it: after a first run, so that outputs the wrapper allocates start as NaN (a CPU allocator hands
    a freed block back, and a kernel that skips tiles would show another run's results there)."""
    from swizzlelab.userkernel.task import UserTask

    task = UserTask(user_kernel, rank=1)
    task.ref_kernel({})
    data = task.generate_input()
    return task.outputs(data, task.custom_kernel(data))


def _assert_same(first: tuple, second: tuple) -> None:
    assert len(first) == len(second) and first
    for a, b in zip(first, second):
        assert a.shape == b.shape
        same = (a == b) | (torch.isnan(a) & torch.isnan(b)) if a.is_floating_point() else a == b
        assert bool(same.all()), f"{int((~same).sum())} elements differ"


def _best_kernel_runs(options: list[str], target: str, best: Path, task: str | None = None) -> None:
    """best_kernel.py imported and run through the same launcher and inputs: the original file's output. It
    is saved under the original's name first, as a user replacing their file does (a launcher in another file
    imports it by that name)."""
    spec = options[0]
    file, sep, name = spec.rpartition(":")
    file, name = (file, name) if sep and file.endswith(".py") else (spec, "")
    home = best.parent / "home"
    home.mkdir(exist_ok=True)
    taken = home / Path(file).name
    taken.write_text(best.read_text())
    original = _open(options, target, task=task)
    rewritten = _open(options, target, kernel=f"{taken}:{name}" if name else str(taken), task=task)
    assert rewritten.kfile.module_source != original.kfile.module_source
    _assert_same(_outputs(original), _outputs(rewritten))


def test_every_wild_file_is_run() -> None:
    """A kernel file added to tests/wild/ gets a row above (the launch and input helpers are not kernels), and
    at least 14 of them are published files (a header naming repository, commit and licence, or torch.compile's
    output with the command that made it)."""
    kernels = {p.name for p in WILD.glob("*.py")} - HELPERS
    covered = {Path(row.options[0].split(":")[0]).name for row in PUBLISHED.values()}
    assert kernels == covered
    published = [p for p in WILD.glob("*.py") if p.read_text().startswith(
        ("# Published kernel kept for swizzlelab's tests", "# Generated by torch.compile"))]
    assert len(published) >= 14, sorted(p.name for p in published)
    for path in published:
        header = path.read_text().splitlines()[:4]
        assert any(line.startswith("# Licence: ") for line in header), path.name


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_kernel_through_optimize_simulate_eval(name: str, tmp_path: Path) -> None:
    row = PUBLISHED[name]
    options, order, target = row.options, row.order, row.target
    task = [row.task] if row.task else []
    kernel = [*task, "--kernel", *options]
    started = time.monotonic()
    optimized = _invoke(["optimize", *kernel, "--target", target, "--budget", "2", "--screen-s", "5",
                         "--workers", "1", "--occupancy", "1", "--out", str(tmp_path / "o")])
    # the run names the site it took (and its twins, the kernel's own names, the device it answered for)
    assert f"swizzle site: {row.site} (" in optimized.output, optimized.output[:3000]
    for text in row.says:
        assert text in optimized.output, text
    method = next(line for line in optimized.output.splitlines() if line.startswith("trace method: "))
    assert method.endswith("; in this process under the Triton interpreter")
    assert ("derived from" in method) != ("fully interpreted" in method or "every one of" in method), method
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    # the run says whether the simulator told the orders apart (report.json the same)
    assert isinstance(report["prediction_separates_orders"], bool) and report["separation"] in optimized.output
    assert "the predictions " + ("" if report["prediction_separates_orders"] else "do not ") + "separate the orders" \
        in report["separation"]
    best = tmp_path / "o" / "best_kernel.py"
    assert best.is_file() and "# Generated by `swizzlelab optimize`" in best.read_text()
    _best_kernel_runs(options, target, best, *task)
    simulated = _invoke(["simulate", *kernel, "--target", target, "--occupancy", "1", "--order", order, "--json"])
    record = json.loads(simulated.stdout[simulated.stdout.index("{"):])
    assert record["orders"][0]["order"] == order and record["kind"].startswith("predicted (model")
    evaluated = _invoke(["eval", *kernel, "--order", order])
    assert "passed: identical to the kernel's own order" in evaluated.output
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_kernel_file_with_another_order_runs(name: str, tmp_path: Path) -> None:
    """The file a user takes home, with an order other than the kernel's own at its site: it imports, runs,
    and computes what the original does."""
    from swizzlelab.scenario import scenario_from_user_kernel

    row = PUBLISHED[name]
    user_kernel = _open(row.options, row.target, task=row.task)
    scenario = scenario_from_user_kernel(user_kernel, row.target, occupancy=1)
    formula = scenario.parse_order(row.order)
    path = tmp_path / Path(user_kernel.kfile.path).name
    path.write_text(user_kernel.file_source(formula))
    _best_kernel_runs(row.options, row.target, path, *([row.task] if row.task else []))


@pytest.mark.parametrize("name", ["xcd", "persistent"])
def test_a_broken_file_taken_home_is_caught(name: str, tmp_path: Path) -> None:
    """The comparison above is not vacuous: a file whose site sends every program to tile (0, 0) (a launcher in
    another file importing it by name included) computes another output, and the check says so."""
    from swizzlelab.runtime import device
    from swizzlelab.swizzle import parse_formula

    if name == "xcd" and device() == "cuda":
        # the kernel states `tl.assume(pid_m > 0)`: compiled, tile (0, 0) breaks that promise and the launch's
        # behaviour is undefined (seen: the CUDA context lost, failing every later test in the process)
        pytest.skip("a compiled site that breaks the kernel's tl.assume is undefined behaviour on a GPU")

    row = PUBLISHED[name]
    user_kernel = _open(row.options, row.target, task=row.task)
    site = user_kernel.site.outputs
    one_tile = parse_formula("pid = tl.program_id(0)\n" + "".join(f"{out} = pid * 0\n" for out in site))
    path = tmp_path / Path(user_kernel.kfile.path).name
    path.write_text(user_kernel.file_source(one_tile))
    with pytest.raises(AssertionError, match="elements differ"):
        _best_kernel_runs(row.options, row.target, path, *([row.task] if row.task else []))


@pytest.mark.parametrize("name", ["batch_invariant", "persistent"])
def test_the_file_taken_home_opens_again_as_a_kernel(name: str, tmp_path: Path) -> None:
    """best_kernel.py given back to swizzlelab (`eval --kernel best_kernel.py`): its site between the markers reads
    the persistent loop's variable through `swz_launch = tile_id` just above them; that line was taken for a
    name the site needs before the loop variable was bound (seen on an H100 with batch_invariant_ops)."""
    from swizzlelab.scenario import scenario_from_user_kernel

    row = PUBLISHED[name]
    user_kernel = _open(row.options, row.target, task=row.task)
    formula = scenario_from_user_kernel(user_kernel, row.target, occupancy=1).parse_order(row.order)
    path = tmp_path / "best_kernel.py"
    path.write_text(user_kernel.file_source(formula))
    kernel = row.options[0].split(":", 1)[1:]
    evaluated = _invoke(["eval", *([row.task] if row.task else []), "--kernel", ":".join([str(path), *kernel]),
                         *row.options[1:]])
    assert "inside the loop over tile_id" in evaluated.output
    assert "passed: identical to the kernel's own order" in evaluated.output
