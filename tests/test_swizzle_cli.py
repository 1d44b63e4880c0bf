"""`swizzlelab check`: exit codes, defect report, permutation id, XCD sharing table, one-line errors.

Runs the real console entry point in a subprocess, as a user would.
"""

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _check(*args):
    return subprocess.run(
        [sys.executable, "-m", "swizzlelab.cli", "check", *args], capture_output=True, text=True, timeout=120
    )


def test_wrong_xcd_formula_fails_with_counts():
    result = _check(str(EXAMPLES / "xcd_wrong.py"), "--grid", "1003")
    assert result.returncode == 1
    assert "3 tiles never run" in result.stdout and "3 tiles run more than once" in result.stdout


def test_correct_formula_passes_with_id_and_domain_table():
    result = _check(str(EXAMPLES / "xcd_chunked.py"), "--grid", "1003", "--target", "mi300x", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["is_bijection"] and len(record["permutation_id"]) == 16
    assert [row["contiguous_runs"] for row in record["domain_sharing"]] == [1] * 8


def test_formula_with_kernel_args_and_constexprs():
    result = _check(
        str(EXAMPLES / "transpose_mi300x.py"), "--grid", "64x64", "--arg", "M=4096", "--arg", "N=4096",
        "--const", "BLOCK_SIZE_M=64", "--const", "BLOCK_SIZE_N=64",
    )
    assert result.returncode == 0 and "bijection on grid 64x64" in result.stdout
    # the same formula is not a bijection when the tile count is not a multiple of 8
    bad = _check(
        str(EXAMPLES / "transpose_mi300x.py"), "--grid", "63x63", "--arg", "M=4032", "--arg", "N=4032",
        "--const", "BLOCK_SIZE_M=64", "--const", "BLOCK_SIZE_N=64",
    )
    assert bad.returncode == 1 and "never run" in bad.stdout


def test_bad_input_is_one_line_without_traceback(tmp_path):
    formula = tmp_path / "bad.py"
    formula.write_text("import os\n")
    for args in ([str(formula), "--grid", "8"], ["missing.py", "--grid", "8"], ["grouped", "--grid", "8q"],
                 ["grouped", "--grid", "8x8", "--target", "tpu9"]):
        result = _check(*args)
        assert result.returncode == 2, args
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
