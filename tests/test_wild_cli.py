"""The commands that accept a kernel file as people write it (--kernel FILE[:KERNEL]), on tests/wild files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from swizzlelab.cli.main import app
from swizzlelab.errors import UserError

WILD = Path(__file__).parent / "wild"
TUTORIAL = [
    "matmul", "--kernel", str(WILD / "tutorial_matmul.py"), "--size", "m=96", "--size", "n=64",
    "--size", "k=64", "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32",
]
ROW_SUM = ["--kernel", str(WILD / "row_sum.py"), "--tensor", "x=float32[R,C]", "--size", "R=64", "--size", "C=256"]


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args)


def test_simulate_user_kernel_json_predictions_from_its_trace():
    from swizzlelab.hw import get_model
    from swizzlelab.sim import simulate
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    result = _invoke(["simulate", *TUTORIAL, "--order", "grouped:GROUP_M=2", "--json", "--occupancy", "1"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout[result.stdout.index("{"):])
    assert record["task"] == "tutorial_matmul:matmul_kernel" and record["grid"] == [3, 2]
    assert record["kind"] == "predicted (model H100-SXM)"
    uk = open_user_kernel(str(WILD / "tutorial_matmul.py"), get_model("h100"),
                          config={"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32},
                          inputs=Inputs(sizes={"m": 96, "n": 64, "k": 64}, task=load_task("matmul")))
    from swizzlelab.swizzle import family, to_permutation

    perm = to_permutation(family("grouped", GROUP_M=2), (3, 2)).perm
    direct = simulate(uk.trace().trace, perm, get_model("h100"))
    assert record["orders"][0]["dram_read_bytes"] == direct.dram_read_bytes


def test_analyze_and_check_user_kernel():
    result = _invoke(["analyze", *ROW_SUM, "--occupancy", "1"])
    assert result.exit_code == 0, result.output
    assert "row_sum:row_sum_kernel" in result.output and "predicted (model H100-SXM" in result.output
    checked = _invoke(["check", "stride:STRIDE=4", *ROW_SUM])
    assert checked.exit_code == 0, checked.output
    assert "bijection on grid 16" in checked.output
    missing = _invoke(["check", "grouped:GROUP_M=2"])
    assert isinstance(missing.exception, UserError) and "--grid" in str(missing.exception)


def test_eval_order_on_user_kernel_is_tested_against_its_own_output():
    result = _invoke(["eval", *TUTORIAL, "--order", "column_major"])
    assert result.exit_code == 0, result.output
    assert "passed: identical to the kernel's own order" in result.output
    assert "CPU interpreter" in result.output


def test_site_option_errors_are_one_line():
    bad = _invoke(["simulate", *ROW_SUM, "--site", "3-4"])
    assert isinstance(bad.exception, UserError) and "lie in no kernel" in str(bad.exception)
    partial = _invoke(["simulate", "matmul", "--kernel", str(WILD / "attention_fwd.py"), "--site", "55-56",
                       "--tensor", "q=float16[N,D]"])
    assert isinstance(partial.exception, UserError) and "not whole statements" in str(partial.exception)


def test_eval_of_an_autotuned_kernel_says_which_config_and_why():
    """Without a GPU an autotuned file runs its first config, and the command says so (on a GPU, eval --mode
    benchmark and optimize run the config its own @triton.autotune picks: tests/test_wild.py, gpu)."""
    fixture = Path(__file__).parent / "fixtures" / "autotuned_matmul.py"
    args = ["eval", "--kernel", str(fixture), "--tensor", "a=float16[M,K]", "--tensor", "b=float16[K,N]",
            "--size", "M=64", "--size", "N=64", "--size", "K=32", "--order", "column_major"]
    result = _invoke(args)
    assert result.exit_code == 0, result.output
    assert ("constexprs/launch options: BLOCK_M=16,BLOCK_N=16,BLOCK_K=16,GROUP_M=4,num_warps=1,num_stages=1 "
            "(autotune config 0 of 3 (BLOCK_M=16,BLOCK_N=16,BLOCK_K=16,GROUP_M=4,num_warps=1,num_stages=1) "
            "(the first: autotuning needs a GPU; choose others with --config/--autotune-config))") in result.output
    assert "passed" in result.output
    chosen = _invoke([*args, "--autotune-config", "2"])
    assert chosen.exit_code == 0, chosen.output
    assert "(autotune config 2 of 3 (BLOCK_M=32," in chosen.output and "given with --autotune-config" in chosen.output
