"""Triton spellings a formula accepts as written in kernels, the fix named for each rejected construct, and
num_pid_m/num_pid_n redefined inside a remap block (the Triton tutorial's matmul)."""

import subprocess
import sys

import pytest

from swizzlelab.errors import FormulaError
from swizzlelab.swizzle import emit_triton, evaluate, family, parse_formula, to_permutation

# The remap block of the Triton tutorial's matmul (03-matrix-multiplication), as it stands in the kernel.
TUTORIAL_BLOCK = """\
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
"""


def test_builtin_min_max_mean_tl_minimum_maximum():
    a = parse_formula("pid = tl.program_id(0)\npid = min(pid, 5) + max(pid - 3, 0, 1)\n")
    b = parse_formula("pid = tl.program_id(0)\npid = tl.minimum(pid, 5) + tl.maximum(tl.maximum(pid - 3, 0), 1)\n")
    assert a.key == b.key
    assert evaluate(a, (9,))["pid"].tolist() == [1, 2, 3, 4, 5, 7, 8, 9, 10]
    assert "min(" not in emit_triton(a).replace("tl.minimum(", "")


def test_axis_keyword_and_num_programs():
    a = parse_formula("pid = tl.program_id(axis=0)\nn = tl.num_programs(axis=0)\npid = n - 1 - pid\n")
    b = parse_formula("pid = tl.program_id(0)\nn = tl.num_programs(0)\npid = n - 1 - pid\n")
    assert a.key == b.key and to_permutation(a, (4,)).perm.tolist() == [3, 2, 1, 0]


def test_pasted_statements_that_mean_the_same():
    text = (
        "pid = tl.program_id(0)\n"
        "tl.assume(pid >= 0)\n"
        "pid_m, pid_n = pid // num_pid_n, pid % num_pid_n\n"
        "pid_m += 0\n"
    )
    assert to_permutation(parse_formula(text), (3, 4)).perm.tolist() == list(range(12))


@pytest.mark.parametrize(
    "text, fix",
    [
        ("pid = tl.min(tl.program_id(0), 3)\n", "use tl.minimum"),
        ("pid = tl.max(tl.program_id(0), 3)\n", "use tl.maximum"),
        ("pid = triton.cdiv(tl.program_id(0), 3)\n", "use tl.cdiv"),
        ("pid = tl.program_id(0) / 2\n", "use '//'"),
        ("pid = tl.program_id(0)\npid /= 2\n", "use '//'"),
        ("pid = tl.program_id(0) ** 2\n", "use <<"),
        ("pid = tl.program_id(0)\nif pid > 3:\n    pid = 0\n", "tl.where"),
        ("pid = tl.program_id(0).to(tl.int64)\n", "drop the .to(...)"),
        ("pid = tl.program_id(0)\npid_m, pid_n = _compute_pid(pid, 4)\n", "inline the helper"),
        ("pid = tl.program_id(0)\noffs = pid * 64 + tl.arange(0, 64)\n", "belong after the swizzle site"),
        ("pid = tl.program_id(0)\npid = min(pid)\n", "at least two"),
        ("pid = tl.program_id(0) and 1\n", "use & and |"),
    ],
)
def test_rejected_constructs_name_the_fix(text, fix):
    with pytest.raises(FormulaError) as err:
        parse_formula(text)
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_tutorial_block_runs_with_no_edits():
    formula = parse_formula(TUTORIAL_BLOCK)
    grouped = to_permutation(family("grouped", GROUP_M=8), (20, 13)).id
    # num_pid_m / num_pid_n come from the grid when M, N and the block sizes are not given ...
    assert to_permutation(formula, (20, 13), consts={"GROUP_SIZE_M": 8}).id == grouped
    # ... and must agree with the grid when they are
    sizes = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "GROUP_SIZE_M": 8}
    assert to_permutation(formula, (20, 13), args={"M": 2500, "N": 800}, consts=sizes).id == grouped
    with pytest.raises(FormulaError, match=r"num_pid_m = tl.cdiv\(M, BLOCK_SIZE_M\) is 21 but the grid 20x13 has 20"):
        to_permutation(formula, (20, 13), args={"M": 2600, "N": 800}, consts=sizes)


def test_tutorial_block_through_the_cli(tmp_path):
    path = tmp_path / "tutorial.py"
    path.write_text(TUTORIAL_BLOCK)
    result = subprocess.run(
        [sys.executable, "-m", "swizzlelab.cli", "check", str(path), "--grid", "20x13", "--const", "GROUP_SIZE_M=8"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "num_pid_m = 20 taken from the grid" in result.stdout
    assert "bijection on grid 20x13" in result.stdout
