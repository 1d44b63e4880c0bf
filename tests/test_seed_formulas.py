"""The original MI300X work's 29 formulas, read where their owner keeps them (../shared/seed_formulas beside the
checkout; they are input data a user pastes and are not copied into the project): each is accepted as written by its task's kernel and runs spliced in it under the interpreter; a name a
kernel lacks is one line; 2-D formulas run on 2-D launched kernel files; the transpose XCD remaps are predicted well
above the kernel's own order at the built-in sub-line case, and their whole output lines cost less time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swizzlelab.cli.main import app, main
from swizzlelab.errors import FormulaError
from swizzlelab.hw import get_model
from swizzlelab.scenario import load_scenario
from swizzlelab.sim import simulate
from swizzlelab.sim.timemodel import TimeModel, Traffic, calibration_for
from swizzlelab.swizzle import find_site, parse_formula
from swizzlelab.swizzle.fitting import continue_kernel
from swizzlelab.tasks import load_task

COUNTS = {"transpose": 9, "matmul": 2, "lean_attention": 10, "spmv": 8}
# Small cases whose tile or program counts are multiples of 8, where the formulas (which divide by 8 XCDs) are
# bijections, run by the CPU interpreter.
SMALL = {
    "transpose": {"seed": 7, "m": 96, "n": 64, "dtype": "float16", "tile_m": 16, "tile_n": 16},
    "matmul": {"seed": 2, "m": 64, "n": 32, "k": 16},
    "spmv": {"seed": 4, "rows": 40, "cols": 1000, "avg_nnz": 8, "communities": 8},
    "lean_attention": {"seed": 6, "batch": 2, "heads": 2, "kv_heads": 1, "head_dim": 64, "min_ctx": 100,
                       "max_ctx": 300, "n_programs": 8},
}
XCD_REMAPS = (1, 2, 3, 6, 8, 9)  # the transpose iterations the original measured at ~24% (its own order 3.5%)


def _shared() -> Path | None:
    """../shared/seed_formulas beside the project's checkout (looked for above it: a worktree sits deeper)."""
    for parent in Path(__file__).resolve().parents[1].parents:
        if (parent / "shared" / "seed_formulas").is_dir():
            return parent / "shared" / "seed_formulas"
    return None


SHARED = _shared()
pytestmark = pytest.mark.skipif(SHARED is None, reason="../shared/seed_formulas (the original work's formulas, kept "
                                "beside the checkout, never copied into it) is not on this machine")
FIXTURES = SHARED or Path("/nonexistent")


def test_the_29_formulas_are_there():
    files = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.txt"))
    assert {task: sum(name.startswith(f"{task}/") for name in files) for task in COUNTS} == COUNTS


def _run_every_formula(task: str, case: dict, config: str) -> list[str]:
    """Each formula of the task parsed for its kernel as written and, where a bijection here, run spliced in it on
    `case` (fresh poisoned output each time) and checked; the names of those not bijections here."""
    scenario = load_scenario(task, case, target="mi300x", config=config, gpu_name="")
    definition = load_task(task)
    data = definition.generate_input(case)
    skipped = []
    for path in sorted((FIXTURES / task).glob("*.txt")):
        order = scenario.parse_order(str(path))
        if not scenario.check(order).proof.is_bijection:
            skipped.append(path.name)
            continue
        data["out"].fill_(float("nan") if data["out"].is_floating_point() else -1)
        result = definition.check(data, definition.custom_kernel(data, order))
        assert result.ok, f"{path.name}: {result.message}"
    return skipped


@pytest.mark.parametrize("task", sorted(COUNTS))
def test_every_formula_is_accepted_as_written_and_runs_in_its_kernel(task):
    skipped = _run_every_formula(task, SMALL[task], "cpu")
    # transpose iteration 5 shifts tiles within a modulus: no bijection anywhere
    assert skipped == (["iteration_05.txt"] if task == "transpose" else [])


def test_a_fragment_yields_its_one_final_value_and_continues_the_kernels_own_site():
    fragment = (FIXTURES / "matmul" / "iteration_01.txt").read_text()
    assert parse_formula(fragment).outputs == ("new_pid",)
    scenario = load_scenario("matmul", {"seed": 1, "m": 1024, "n": 1024, "k": 64}, target="mi300x", gpu_name="")
    # iteration 2 is the identity over the site's (grouped) tile ids: the kernel's own order, as the original found
    again = scenario.permutation(str(FIXTURES / "matmul" / "iteration_02.txt"))
    assert again.id == scenario.permutation(None).id
    assert scenario.permutation(str(FIXTURES / "matmul" / "iteration_01.txt")).id != again.id


def _main(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """The console entry point in this process (its one-line errors): (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["swizzlelab", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    return int(info.value.code or 0), capsys.readouterr().err


def test_a_name_the_kernel_lacks_is_one_line_naming_what_it_has(tmp_path, monkeypatch, capsys):
    scenario = load_scenario("spmv", "test:0", target="mi300x", gpu_name="")
    text = (FIXTURES / "spmv" / "iteration_01.txt").read_text().replace("num_blocks = M", "num_blocks = N_ROWS")
    with pytest.raises(FormulaError) as err:
        scenario.formula(text)
    message = str(err.value)
    assert "N_ROWS" in message and "it has BLOCK, M, pid" in message and "\n" not in message
    path = tmp_path / "bad.txt"
    path.write_text(text)
    code, err = _main(["simulate", "spmv", "--size", "rows=64", "--order", str(path)], monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "N_ROWS" in err
    source = (
        "def k(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    base = tl.load(x_ptr)\n"
        "    pid = tl.program_id(0)\n"
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, offs, mask=offs < n)\n"
    )
    with pytest.raises(FormulaError, match=r"reads base, which k's kernel computes .* \(line 2: base = tl.load"):
        continue_kernel(parse_formula("pid = tl.program_id(0) + base\n"), find_site(source, "k"), {"n", "BLOCK"},
                        "k's kernel")


def test_transpose_xcd_remaps_are_predicted_well_above_the_own_order_at_the_built_in_sub_line_case():
    scenario = load_scenario("transpose", "bench:2", target="mi300x", gpu_name="")
    assert scenario.sizes == {"m": 4096, "n": 4096, "dtype": "float16", "tile_m": 32, "tile_n": 32}
    own = scenario.permutation(None)
    perms = {i: scenario.check(scenario.parse_order(str(FIXTURES / "transpose" / f"iteration_{i:02d}.txt")))
             for i in range(1, 10)}
    assert not perms[5].proof.is_bijection
    assert perms[4].permutation_id == perms[7].permutation_id == own.id
    results = {pid: simulate(scenario.trace, perm, scenario.model)
               for pid, perm in {own.id: own.perm, **{c.permutation_id: c.perm for c in perms.values()
                                                      if c.proof.is_bijection}}.items()}
    base = results[own.id]
    timing = TimeModel(scenario.model, calibration_for(scenario.model), Traffic.of(base))
    for i in XCD_REMAPS:
        got = results[perms[i].permutation_id]
        assert got.l2_hit_rate > base.l2_hit_rate + 0.2, i
        # The same DRAM bytes, but each output line written back whole by one XCD, not in halves by two.
        assert got.dram_write_bytes == base.dram_write_bytes and got.partial_write_bytes < base.partial_write_bytes
        assert timing.predict(Traffic.of(got)).speedup > 1.05
    assert base.partial_write_bytes == base.dram_write_bytes  # every output line leaves as two 64-byte halves


def test_partial_line_writes_cost_time_on_amd_models_only():
    traffic = Traffic(dram_bytes=2e9, partial_write_bytes=1e9)
    whole = Traffic(dram_bytes=2e9)
    for name, costs in (("mi300x", True), ("h100", False)):
        model = get_model(name)
        time_model = TimeModel(model, calibration_for(model), traffic)
        assert (time_model.predict(whole).speedup > 1.1) == costs, name


def test_two_d_formulas_run_on_a_two_d_launched_kernel_file_as_on_the_task(tmp_path, monkeypatch, capsys):
    kernel = tmp_path / "transpose_2d.py"
    kernel.write_text(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\n"
        "def transpose_kernel(input_ptr, output_ptr, M, N, stride_in_m, stride_in_n, stride_out_m, stride_out_n,\n"
        "                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):\n"
        "    pid_m = tl.program_id(0)\n"
        "    pid_n = tl.program_id(1)\n"
        "    offsets_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)\n"
        "    offsets_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)\n"
        "    mask = (offsets_m[:, None] < M) & (offsets_n[None, :] < N)\n"
        "    inputs = input_ptr + offsets_m[:, None] * stride_in_m + offsets_n[None, :] * stride_in_n\n"
        "    tile = tl.load(inputs, mask=mask)\n"
        "    out = output_ptr + offsets_n[:, None] * stride_out_m + offsets_m[None, :] * stride_out_n\n"
        "    tl.store(out, tl.trans(tile), mask=tl.trans(mask))\n\n\n"
        "def transpose(x):\n"
        "    M, N = x.shape\n"
        "    y = torch.empty((N, M), device=x.device, dtype=x.dtype)\n"
        "    grid = lambda META: (triton.cdiv(M, META['BLOCK_SIZE_M']), triton.cdiv(N, META['BLOCK_SIZE_N']))\n"
        "    transpose_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),\n"
        "                           BLOCK_SIZE_M=32, BLOCK_SIZE_N=32)\n"
        "    return y\n"
    )
    orders = [arg for i in (1, 2, 4) for arg in ("--order", str(FIXTURES / "transpose" / f"iteration_{i:02d}.txt"))]
    sizes = ["--size", "m=256", "--size", "n=256"]
    user = CliRunner().invoke(app, ["simulate", "transpose", "--kernel", str(kernel), *sizes, *orders, "--target",
                                    "mi300x", "--json"])
    assert user.exit_code == 0, user.output
    task = CliRunner().invoke(app, ["simulate", "transpose", *sizes, "--size", "tile_m=32", "--size", "tile_n=32",
                                    *orders, "--target", "mi300x", "--json"])
    assert task.exit_code == 0, task.output
    ids = [[o["permutation_id"] for o in json.loads(r.output[r.output.index("{"):])["orders"]] for r in (user, task)]
    assert ids[0] == ids[1] and ids[0][0] != ids[0][2]  # iteration 4 is the own order, 1 is not
    two_d = tmp_path / "two_d.txt"
    two_d.write_text("pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)\n")
    code, err = _main(["simulate", "spmv", "--size", "rows=64", "--order", str(two_d)], monkeypatch, capsys)
    assert code == 2 and "reads tl.program_id(1) but spmv's kernel launches a 1-D grid" in err


# GPU-sized cases whose tile or program counts are multiples of 8 (the compiled kernels, GPU_CONFIG).
ON_GPU = {
    "transpose": {"seed": 13, "m": 4096, "n": 4096, "dtype": "float16", "tile_m": 32, "tile_n": 32},
    "matmul": {"seed": 12, "m": 1024, "n": 1024, "k": 256},
    "spmv": {"seed": 11, "rows": 4096, "cols": 4096, "avg_nnz": 32, "communities": 1},
    "lean_attention": {"seed": 0, "batch": 2, "heads": 8, "kv_heads": 2, "head_dim": 128, "min_ctx": 1000,
                       "max_ctx": 3000, "n_programs": 304},
}


@pytest.mark.gpu
@pytest.mark.parametrize("task", sorted(COUNTS))
def test_every_formula_runs_compiled_in_its_kernel_on_a_gpu(task):
    assert _run_every_formula(task, ON_GPU[task], "gpu") == (["iteration_05.txt"] if task == "transpose" else [])
