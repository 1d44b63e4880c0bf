"""Chunked evaluation and proof: exactly the whole-launch result, memory refused up front, launch limits.

The streamed proof is compared with a proof from whole-launch arrays (prove_outputs) for right and wrong orders.
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swizzlelab.errors import FormulaError, UserError
from swizzlelab.swizzle import check_order, evaluate, family, parse_formula, parse_order, permutation_id
from swizzlelab.swizzle.evaluate import _Evaluator, build_env, launch_shape, run_statements
from swizzlelab.swizzle.proof import prove_outputs

# the package re-exports the function `evaluate`, which hides the module of that name
evaluate_module = sys.modules["swizzlelab.swizzle.evaluate"]

FORMULAS = {
    "grouped": (family("grouped", GROUP_M=3), (11, 7)),
    "xcd_grouped": (parse_order("xcd:NUM_XCDS=4+grouped:GROUP_M=2", 2), (9, 13)),
    "hilbert": (family("hilbert", SIDE=4), (10, 10)),
    "shift_mod": (parse_formula("pid = tl.program_id(0)\npid = (pid + (pid % 8)) % tl.num_programs(0)\n"), (1000,)),
    "all_zero": (parse_formula("pid = tl.program_id(0) * 0\n"), (300,)),
    "out_of_range": (parse_formula("pid = tl.program_id(0) * 3 - 5\n"), (400,)),
    "xcd_no_tail": (
        parse_formula("pid = tl.program_id(0)\nxcd = pid % 8\npid = xcd * (tl.num_programs(0) // 8) + pid // 8\n"),
        (1003,),
    ),
    "two_d_launch": (parse_formula("pid_m = tl.program_id(0)\npid_n = (tl.program_id(1) * 2) % 9\n"), (5, 9)),
}


def _whole_launch(formula, grid):
    """Evaluate every program in one array, without the chunked code path."""
    launch = launch_shape(formula, grid)
    evaluator = _Evaluator(launch, build_env(grid, None, None))
    run_statements(evaluator, formula, grid)
    n = int(np.prod(launch))
    outputs = {name: np.broadcast_to(evaluator.env[name].data, (n,)).astype(np.int64) for name in formula.outputs}
    return prove_outputs(outputs, formula, grid)


@pytest.mark.parametrize("name", sorted(FORMULAS))
@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_chunked_proof_equals_whole_launch_proof(name, chunk):
    formula, grid = FORMULAS[name]
    expected, tiles = _whole_launch(formula, grid)
    result = check_order(formula, grid, chunk=chunk, keep_perm=True)
    assert result.proof == expected
    assert np.array_equal(result.perm, tiles)
    if expected.is_bijection:
        assert result.permutation_id == permutation_id(grid, tiles)
    else:
        assert result.permutation_id is None


@settings(max_examples=30, deadline=None)
@given(
    grid=st.integers(1, 3000),
    mult=st.integers(0, 7),
    shift=st.integers(-3, 3),
    mod=st.integers(1, 3000),
    chunk=st.integers(1, 500),
)
def test_chunked_defect_counts_match_on_arbitrary_wrong_orders(grid, mult, shift, mod, chunk):
    # scattered (and often duplicated) tiles exercise the sort-free duplicate detection
    formula = parse_formula(f"pid = (tl.program_id(0) * {mult} + {shift}) % {mod}\n")
    expected, _ = _whole_launch(formula, (grid,))
    assert check_order(formula, (grid,), chunk=chunk).proof == expected


def test_scattered_duplicates_inside_one_chunk_are_found():
    # 4096 programs, tiles spread over a wide range, every tile hit by exactly 2 programs 256 apart
    # (equal in the low byte of their index: the first tag pass alone cannot see them)
    formula = parse_formula("p = tl.program_id(0)\npid = ((p % 256) + (p // 512) * 256) * 16 % 40000\n")
    expected, _ = _whole_launch(formula, (40000,))
    result = check_order(formula, (40000,), chunk=4096)
    assert result.proof == expected and result.proof.n_duplicated > 0


def test_evaluate_in_chunks_matches_small_chunks(monkeypatch):
    formula, grid = FORMULAS["xcd_grouped"]
    whole = evaluate(formula, grid)
    monkeypatch.setattr(evaluate_module, "MAX_CHUNK", 5)
    monkeypatch.setattr(evaluate_module, "MIN_CHUNK", 5)
    chunked = evaluate(formula, grid)
    assert all(np.array_equal(whole[k], chunked[k]) for k in whole)


def test_errors_name_the_global_program_in_chunks():
    formula = parse_formula("pid = tl.program_id(0)\npid = pid // (pid - 700)\n")
    with pytest.raises(FormulaError, match="first: program 700"):
        check_order(formula, (1000,), chunk=64)


def test_work_that_does_not_fit_is_refused_up_front(monkeypatch):
    monkeypatch.setattr(evaluate_module, "available_memory_bytes", lambda: 10 * 2**20)
    with pytest.raises(UserError, match=r"needs about .* of memory but 10\.00 MB is available"):
        check_order(family("grouped"), (3000, 3000))
    with pytest.raises(UserError, match="needs about"):
        evaluate(family("grouped"), (3000, 3000))


def test_launches_triton_cannot_run_are_refused():
    with pytest.raises(FormulaError, match="int32"):
        check_order(family("grouped"), (100000, 100000))
    two_d = parse_formula("pid_m = tl.program_id(0)\npid_n = tl.program_id(1)\n")
    with pytest.raises(FormulaError, match="at most 65,535"):
        check_order(two_d, (4, 70000))


def test_cli_refuses_huge_grid_with_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "swizzlelab.cli", "check", "grouped:GROUP_M=8", "--grid", "100000x100000"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "int32" in result.stderr


def test_progress_bar_appears_only_after_the_delay(monkeypatch):
    from swizzlelab.cli.swizzle import _Progress

    with _Progress("proving") as quick:
        quick.update(10, 100)
        assert quick.bar is None
    monkeypatch.setattr(_Progress, "SHOW_AFTER_S", 0.0)
    with _Progress("proving") as slow:
        slow.update(10, 100)
        slow.update(50, 100)
        assert slow.bar is not None and slow.bar.tasks[0].completed == 50
