"""Swizzle language: parsing rules, Triton integer semantics, bijection proofs and permutation ids.

Families are property-tested on arbitrary grids; wrong formulas from the wild are rejected with counts.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swizzlelab.errors import FormulaError, NotABijectionError, UserError
from swizzlelab.swizzle import (
    FAMILIES,
    evaluate,
    family,
    parse_formula,
    parse_order,
    permutation_id,
    prove,
    to_permutation,
)

GRID_2D = st.tuples(st.integers(1, 70), st.integers(1, 70))
GRID_1D = st.tuples(st.integers(1, 5000))


def _family_param_strategy(name):
    spec = FAMILIES[name]
    params = {}
    for p in spec.params:
        if p.power_of_two:
            params[p.name] = st.sampled_from([2, 4, 8, 16, 32])
        else:
            params[p.name] = st.integers(1, 40)
    return st.fixed_dictionaries(params)


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.kind == "2d"])
@settings(max_examples=40, deadline=None)
@given(data=st.data(), grid=GRID_2D)
def test_every_2d_family_is_a_bijection(name, data, grid):
    params = data.draw(_family_param_strategy(name))
    proof = prove(family(name, **params), grid)
    assert proof.is_bijection, proof.message()


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.kind == "linear"])
@settings(max_examples=60, deadline=None)
@given(data=st.data(), grid=GRID_1D)
def test_every_linear_family_is_a_bijection(name, data, grid):
    params = data.draw(_family_param_strategy(name))
    assert prove(family(name, **params), grid).is_bijection


@settings(max_examples=40, deadline=None)
@given(grid=GRID_2D, xcds=st.integers(1, 12), group=st.integers(1, 16), outer=st.sampled_from(["grouped", "hilbert", "tiles"]))
def test_composition_xcd_on_2d_family_is_a_bijection(grid, xcds, group, outer):
    params = {"grouped": f"GROUP_M={group}", "hilbert": "SIDE=4", "tiles": f"TILE_M={group},TILE_N=3"}[outer]
    formula = parse_order(f"xcd:NUM_XCDS={xcds}+{outer}:{params}", 2)
    assert prove(formula, grid).is_bijection


def test_one_row_and_one_column_grids():
    for name, spec in FAMILIES.items():
        if spec.kind == "2d":
            for grid in [(1, 1), (1, 37), (37, 1)]:
                assert prove(family(name), grid).is_bijection, (name, grid)


def test_grouped_matches_the_triton_tutorial_order():
    perm = to_permutation(family("grouped", GROUP_M=2), (3, 2)).perm
    # rows 0-1 first, column by column, then the last row alone
    assert perm.tolist() == [0, 2, 1, 3, 4, 5]


def test_column_major_and_diagonal_on_small_grid():
    assert to_permutation(family("column_major"), (2, 3)).perm.tolist() == [0, 3, 1, 4, 2, 5]
    pid_m_pid_n = evaluate(family("diagonal"), (2, 3))
    assert pid_m_pid_n["pid_m"].tolist() == [0, 1, 0, 1, 0, 1]
    assert pid_m_pid_n["pid_n"].tolist() == [0, 1, 1, 2, 2, 0]


def test_hilbert_neighbours_are_adjacent_inside_a_block():
    perm = to_permutation(family("hilbert", SIDE=8), (8, 8)).perm
    rows, cols = perm // 8, perm % 8
    steps = np.abs(np.diff(rows)) + np.abs(np.diff(cols))
    assert (steps == 1).all()


# --- formulas found in the wild, and ones we construct, with their correct counterparts -----------------
WRONG_AND_RIGHT = {
    "shift_mod_total": (
        "pid = tl.program_id(0)\ntotal = tl.num_programs(0)\npid = (pid + (pid % 8)) % total\n",
        "pid = tl.program_id(0)\ntotal = tl.num_programs(0)\npid = (pid + 8) % total\n",
        (1000,),
    ),
    "xcd_without_tail": (
        "pid = tl.program_id(0)\nxcd = pid % 8\npid = xcd * (tl.num_programs(0) // 8) + pid // 8\n",
        "pid = tl.program_id(0)\nn = tl.num_programs(0)\nxcd = pid % 8\n"
        "pid = xcd * (n // 8) + tl.minimum(xcd, n % 8) + pid // 8\n",
        (1003,),
    ),
    "ceil_chunk_overflows": (
        "pid = tl.program_id(0)\nper = tl.cdiv(tl.num_programs(0), 8)\npid = (pid % 8) * per + pid // 8\n",
        "pid = tl.program_id(0)\nn = tl.num_programs(0)\nxcd = pid % 8\n"
        "pid = xcd * (n // 8) + tl.minimum(xcd, n % 8) + pid // 8\n",
        (1001,),
    ),
    "grouped_without_min": (
        "pid = tl.program_id(0)\ngroup = 4 * num_pid_n\nfirst = (pid // group) * 4\n"
        "pid_m = first + (pid % group) % 4\npid_n = (pid % group) // 4\n",
        "pid = tl.program_id(0)\ngroup = 4 * num_pid_n\nfirst = (pid // group) * 4\n"
        "size = tl.minimum(num_pid_m - first, 4)\npid_m = first + (pid % group) % size\npid_n = (pid % group) // size\n",
        (10, 7),
    ),
    "transpose_swap_on_rectangle": (
        "pid = tl.program_id(0)\npid_m = pid % num_pid_n\npid_n = pid // num_pid_n\n",
        "pid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = pid // num_pid_m\n",
        (6, 4),
    ),
    "diagonal_without_wrap": (
        "pid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = (pid // num_pid_m + pid_m) % num_pid_m\n",
        "pid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = (pid // num_pid_m + pid_m) % num_pid_n\n",
        (5, 7),
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_AND_RIGHT))
def test_wrong_formulas_rejected_with_counts_and_fixes_pass(case):
    wrong, right, grid = WRONG_AND_RIGHT[case]
    proof = prove(parse_formula(wrong), grid)
    assert not proof.is_bijection
    assert proof.n_missing + proof.n_duplicated + proof.n_out_of_range > 0
    message = proof.message()
    assert "not a bijection" in message
    with pytest.raises(NotABijectionError):
        to_permutation(parse_formula(wrong), grid)
    assert prove(parse_formula(right), grid).is_bijection


def test_defect_counts_are_exact():
    proof = prove(parse_formula(WRONG_AND_RIGHT["xcd_without_tail"][0]), (1003,))
    assert (proof.n_missing, proof.n_duplicated, proof.n_out_of_range) == (3, 3, 0)
    assert proof.missing_examples[:3] == ("tile 1000", "tile 1001", "tile 1002")
    shifted = prove(parse_formula(WRONG_AND_RIGHT["shift_mod_total"][0]), (1000,))
    assert shifted.n_missing == 500 and shifted.n_duplicated == 500


def test_out_of_range_outputs_are_counted():
    proof = prove(parse_formula("pid = tl.program_id(0) + 2\n"), (10,))
    assert proof.n_out_of_range == 2 and proof.n_missing == 2


# --- semantics ----------------------------------------------------------------------------------------------
def test_runtime_division_truncates_like_c_and_constexpr_like_python():
    out = evaluate(parse_formula("pid = (tl.program_id(0) - 5) // 3\n"), (10,))["pid"]
    assert out.tolist() == [-1, -1, -1, 0, 0, 0, 0, 0, 1, 1]
    rem = evaluate(parse_formula("pid = (tl.program_id(0) - 5) % 3\n"), (10,))["pid"]
    assert rem.tolist() == [-2, -1, 0, -2, -1, 0, 1, 2, 0, 1]
    const = evaluate(parse_formula("pid = tl.program_id(0) * 0 + (-7 // C)\n"), (2,), consts={"C": 2})["pid"]
    assert const.tolist() == [-4, -4]
    runtime = evaluate(parse_formula("pid = tl.program_id(0) * 0 + (-7 // A)\n"), (2,), args={"A": 2})["pid"]
    assert runtime.tolist() == [-3, -3]


def test_int32_overflow_is_reported():
    with pytest.raises(FormulaError, match="int32 overflow"):
        evaluate(parse_formula("pid = tl.program_id(0) * 1000000000\n"), (5,))
    big = evaluate(parse_formula("pid = tl.program_id(0) * 0 + M * 4\n"), (2,), args={"M": 2**31})
    assert big["pid"].tolist() == [2**33, 2**33]


def test_division_by_zero_names_the_line():
    with pytest.raises(FormulaError, match="line 2: division by zero"):
        evaluate(parse_formula("pid = tl.program_id(0)\npid = pid // (pid - pid)\n"), (4,))


def test_conditional_expression_and_where_agree():
    a = evaluate(parse_formula("pid = tl.program_id(0)\npid = 9 - pid if pid < 5 else pid\n"), (10,))
    b = evaluate(parse_formula("pid = tl.program_id(0)\npid = tl.where(pid < 5, 9 - pid, pid)\n"), (10,))
    assert a["pid"].tolist() == b["pid"].tolist()


def test_two_d_launch_uses_axis_zero_fastest():
    formula = parse_formula("pid_m = tl.program_id(0)\npid_n = tl.program_id(1)\n")
    assert formula.launch_rank == 2
    assert to_permutation(formula, (2, 3)).perm.tolist() == [0, 3, 1, 4, 2, 5]


# --- identity ---------------------------------------------------------------------------------------------
def test_same_order_from_different_text_has_one_id():
    a = to_permutation(family("grouped", GROUP_M=1), (12, 9))
    b = to_permutation(family("identity"), (12, 9))
    c = to_permutation(parse_formula("pid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = pid - pid_m * num_pid_n\n"), (12, 9))
    assert a.id == b.id == c.id
    assert to_permutation(family("column_major"), (12, 9)).id != a.id
    assert permutation_id((4, 3), a.perm) != permutation_id((3, 4), a.perm[:12])


# --- malformed input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, fragment",
    [
        ("pid = tl.program_id(0) +\n", "syntax error"),
        ("import os\npid = 1\n", "import"),
        ("pid = tl.program_id(0)\nx = pid.real\n", "attribute access"),
        ("for i in range(3):\n    pid = i\n", "loop"),
        ("while True:\n    pid = 1\n", "loop"),
        ("pid = tl.program_id(0)\npid = pid / 2\n", "true division"),
        ("pid = tl.program_id(0)\npid = pid ** 2\n", "power"),
        ("pid = tl.load(x)\n", "tl.load"),
        ("pid = open('x')\n", "call of 'open'"),
        ("pid = tl.program_id(0) and 1\n", "'and'/'or'"),
        ("pid = [1, 2]\n", "list"),
        ("pid = tl.program_id(k)\n", "constant axis"),
        ("pid = 1.5\n", "constant 1.5"),
        ("x = 1\n", "assigns neither"),
        ("", "empty formula"),
    ],
)
def test_malformed_formulas_give_one_line_errors(text, fragment):
    with pytest.raises(FormulaError) as err:
        parse_formula(text)
    message = str(err.value)
    assert fragment in message
    assert "\n" not in message


def test_undefined_name_is_a_one_line_error():
    with pytest.raises(FormulaError, match="name 'GROUP' is not defined"):
        evaluate(parse_formula("pid = tl.program_id(0) % GROUP\n"), (8,))


def test_parse_order_errors():
    with pytest.raises(UserError, match="unknown swizzle family"):
        parse_order("spiral", 2)
    with pytest.raises(UserError, match="power of two"):
        parse_order("hilbert:SIDE=6", 2)
    with pytest.raises(UserError, match="no parameter"):
        parse_order("grouped:G=3", 2)
    with pytest.raises(FormulaError, match="1-D"):
        parse_order("grouped", 1)


def test_stride_runs_residue_classes_one_after_another():
    assert to_permutation(family("stride", STRIDE=3), (10,)).perm.tolist() == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]
    assert to_permutation(parse_order("interleave:STRIDE=4", 1), (8,)).perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    # a stride beyond the grid leaves every class with one program: the launch order
    assert to_permutation(family("stride", STRIDE=50), (7,)).perm.tolist() == list(range(7))
