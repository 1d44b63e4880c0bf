"""Bad and pasted formula input: one-line errors with the fix, and formulas as engineers paste them.

Covers the formula-language items of issue 10 (files, outputs, family specs, pasted text, 2-D launches).
"""

import subprocess
import sys

import numpy as np
import pytest

from swizzlelab.errors import FormulaError, UserError
from swizzlelab.swizzle import compose, family, parse_formula, parse_order, prove, to_permutation


def _check(*args):
    return subprocess.run(
        [sys.executable, "-m", "swizzlelab.cli", "check", *args], capture_output=True, text=True, timeout=120
    )


def _one_line_exit_2(result):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_binary_formula_file_and_directory_are_one_line_errors(tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(bytes(range(256)))
    assert "binary" in _one_line_exit_2(_check(str(binary), "--grid", "8"))
    latin = tmp_path / "latin.py"
    latin.write_bytes("pid = tl.program_id(0)  # caf\xe9\n".encode("latin-1"))
    assert "not UTF-8" in _one_line_exit_2(_check(str(latin), "--grid", "8"))
    message = _one_line_exit_2(_check(str(tmp_path), "--grid", "8"))
    assert "is a directory" in message and "unknown swizzle family" not in message


def test_formula_assigning_only_pid_m_is_an_error_not_a_bijection(tmp_path):
    for text in ("pid_m = 0\n", "pid = tl.program_id(0)\npid_m = 0\n"):
        path = tmp_path / "f.py"
        path.write_text(text)
        message = _one_line_exit_2(_check(str(path), "--grid", "8x8"))
        assert "never pid_n" in message
        with pytest.raises(FormulaError, match="never pid_n"):
            parse_order(str(path), 2)


def test_linear_order_composed_on_2d_grid_keeps_nothing_it_assigned_to_pid_m():
    # pid_m/pid_n of the first (linear) order are its temporaries: the row-major decode that follows
    # must not be overwritten by them, nor they by it.
    linear = parse_formula("pid = tl.program_id(0)\npid_m = pid // 3\npid_n = 0\npid = pid\n", rank=1)
    assert linear.outputs == ("pid",)
    composed = compose(linear, family("identity"))
    assert to_permutation(composed, (4, 3)).perm.tolist() == list(range(12))


def test_missing_output_is_named():
    with pytest.raises(FormulaError, match="never assigns output 'new_pid'"):
        parse_formula("pid = tl.program_id(0)\n", ("new_pid",))


def test_family_spec_with_empty_part_is_an_error():
    for spec in ("grouped:GROUP_M=8+", "+grouped", "xcd++grouped"):
        with pytest.raises(UserError, match="empty part"):
            parse_order(spec, 2)
    assert "empty part" in _one_line_exit_2(_check("grouped:GROUP_M=8+", "--grid", "8x8"))


def test_indented_text_copied_from_a_kernel_is_dedented():
    pasted = """
        pid = tl.program_id(axis=0)
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
    """
    formula = parse_formula(pasted)
    assert formula.outputs == ("pid_m", "pid_n")
    grouped = to_permutation(family("grouped", GROUP_M=4), (10, 7))
    assert to_permutation(formula, (10, 7), consts={"GROUP_M": 4}).id == grouped.id
    # the first line copied from the middle of an indented line, the rest with their indentation
    lost_first = "pid = tl.program_id(0)\n    pid_m = pid // num_pid_n\n    pid_n = pid % num_pid_n\n"
    assert to_permutation(parse_formula(lost_first), (3, 5)).perm.tolist() == list(range(15))


def test_two_d_launch_with_kernel_names_and_outputs_option(tmp_path):
    path = tmp_path / "attn.py"
    path.write_text("start_m = tl.program_id(0)\noff_hz = tl.program_id(axis=1)\n")
    message = _one_line_exit_2(_check(str(path), "--grid", "4x6"))
    assert "--outputs start_m,off_hz" in message
    ok = _check(str(path), "--grid", "4x6", "--outputs", "start_m,off_hz")
    assert ok.returncode == 0 and "bijection on grid 4x6" in ok.stdout
    formula = parse_formula(path.read_text(), ("start_m", "off_hz"))
    assert formula.launch_rank == 2
    # axis 0 runs fastest: launch index i = start_m + 4 * off_hz runs tile start_m * 6 + off_hz
    perm = to_permutation(formula, (4, 6)).perm
    i = np.arange(24)
    assert perm.tolist() == ((i % 4) * 6 + i // 4).tolist()


def test_formula_computing_into_its_own_name(tmp_path):
    text = (
        "pid = tl.program_id(0)\n"
        "pid_m = pid // 8\n"
        "pid_n = pid % 8\n"
        "new_pid = pid_n * 8 + pid_m\n"
    )
    # without --outputs the default (pid_m, pid_n) would silently drop the line that matters
    with pytest.raises(FormulaError, match="--outputs new_pid"):
        parse_formula(text, rank=1)
    formula = parse_formula(text, ("new_pid",), rank=1)
    assert to_permutation(formula, (64,)).perm.tolist() == [(i % 8) * 8 + i // 8 for i in range(64)]
    path = tmp_path / "transposed.py"
    path.write_text(text)
    result = _check(str(path), "--grid", "64", "--outputs", "new_pid")
    assert result.returncode == 0, result.stderr


def test_pid_m_pid_n_are_intermediates_on_a_1d_grid(tmp_path):
    text = "pid = tl.program_id(0)\npid_m = pid // 4\npid_n = pid % 4\npid = pid_n * 4 + pid_m\n"
    assert parse_formula(text, rank=1).outputs == ("pid",)
    path = tmp_path / "f.py"
    path.write_text(text)
    assert parse_order(str(path), 1).outputs == ("pid",)
    assert prove(parse_formula(text, rank=1), (16,)).is_bijection
    assert _check(str(path), "--grid", "16").returncode == 0


def test_non_bijection_error_names_a_command_that_exists():
    from swizzlelab.sim.setup import as_perm

    with pytest.raises(UserError) as err:
        as_perm(np.zeros(4, dtype=np.int64), 4)
    assert "swizzlelab check" in str(err.value) and "swizzlelab prove" not in str(err.value)


def test_swizzle_package_imports_neither_torch_nor_triton():
    # `swizzlelab check` must start fast: only emit.apply_swizzle may import triton, when it runs
    code = (
        "import sys, swizzlelab.swizzle as s\n"
        "s.to_permutation(s.parse_order('xcd+grouped', 2), (64, 64))\n"
        "s.emit_triton(s.family('grouped'))\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
