"""Correctness harness on the CPU interpreter: planted wrong kernels fail with a clear message, a correct one passes.

Kernels: the transpose task's own kernel (with good and non-bijective orders) and a tiny tiled kernel written
here whose MODE constexpr plants one bug each (off-by-one tile, NaN output).
"""

import math

import pytest
import torch
import triton
import triton.language as tl

from swizzlelab.errors import UserError
from swizzlelab.harness import check_correctness, count_poisoned, derive_seed, poison_, poison_value
from swizzlelab.harness.correctness import INT_POISON, case_sizes
from swizzlelab.harness.evaluate import load_submission, make_candidate, run_tests
from swizzlelab.swizzle import parse_formula
from swizzlelab.tasks import load_task
from swizzlelab.tasks.checking import Tolerance, compare

BLOCK = 8


@triton.jit
def _affine_kernel(x_ptr, out_ptr, m, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    # out = 2 * x + 1 over BLOCK x BLOCK tiles, one program per tile, row-major tile order.
    num_pid_n = tl.cdiv(n, BLOCK)
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_m[:, None] < m) & (offs_n[None, :] < n)
    x = tl.load(x_ptr + offs_m[:, None] * n + offs_n[None, :], mask=mask)
    y = 2.0 * x + 1.0
    if MODE == 1:
        # planted bug: the tile is stored one tile to the right (off by one tile along n)
        offs_n = offs_n + BLOCK
        mask = (offs_m[:, None] < m) & (offs_n[None, :] < n)
    if MODE == 2:
        # planted bug: element (0, 0) of every tile becomes 0/0
        corner = (tl.arange(0, BLOCK)[:, None] == 0) & (tl.arange(0, BLOCK)[None, :] == 0)
        y = tl.where(corner, y * float("nan"), y)
    tl.store(out_ptr + offs_m[:, None] * n + offs_n[None, :], y, mask=mask)


class AffineTask:
    """A minimal task in the registry's shape: out = 2x + 1 in fp32."""

    name = "affine"
    path = "."
    tolerance = Tolerance(rtol=1e-6, atol=1e-6)

    def cases(self, kind="tests"):
        return ({"seed": 5, "m": 19, "n": 29},)

    def generate_input(self, case):
        gen = torch.Generator().manual_seed(int(case["seed"]))
        x = torch.randn((case["m"], case["n"]), generator=gen)
        return {"x": x, "out": torch.empty_like(x)}

    def ref_kernel(self, data):
        return 2.0 * data["x"] + 1.0

    def check(self, data, output):
        return compare(output, self.ref_kernel(data), self.tolerance)


def affine(mode: int):
    def run(data):
        m, n = data["x"].shape
        grid = (triton.cdiv(m, BLOCK) * triton.cdiv(n, BLOCK),)
        _affine_kernel[grid](data["x"], data["out"], m, n, BLOCK=BLOCK, MODE=mode)
        return data["out"]

    return run


CASE = {"seed": 5, "m": 19, "n": 29}


def test_correct_kernel_passes_on_both_seeds():
    result = check_correctness(AffineTask(), affine(0), CASE)
    assert result.passed, result.message
    assert [run.seed for run in result.runs] == [5, derive_seed(5, "recheck")]
    assert result.runs[0].n_poisoned == 0


def test_off_by_one_tile_fails_with_count_error_and_index():
    result = check_correctness(AffineTask(), affine(1), CASE)
    assert not result.passed
    run = result.runs[0]
    assert run.n_bad > 0 and run.worst_index is not None
    # the first column of tiles is never written: its elements still hold the NaN poison
    assert run.n_poisoned == 19 * BLOCK
    assert "elements differ" in result.message and "still hold NaN" in result.message
    assert "\n" not in result.message


def test_nan_output_fails():
    result = check_correctness(AffineTask(), affine(2), CASE)
    assert not result.passed
    n_tiles = math.ceil(19 / BLOCK) * math.ceil(29 / BLOCK)
    assert result.runs[0].n_bad == n_tiles
    assert "got nan" in result.message


def test_cached_result_fails_on_the_second_seed():
    cache = {}

    def cached(data):
        if "out" not in cache:
            cache["out"] = affine(0)(data).clone()
        return cache["out"]

    result = check_correctness(AffineTask(), cached, CASE)
    assert not result.passed
    assert result.runs[0].passed and not result.runs[1].passed
    assert result.message.startswith(f"seed {derive_seed(5, 'recheck')}:")


def test_cached_copy_into_out_also_fails():
    cache = {}

    def cached_copy(data):
        if "value" not in cache:
            cache["value"] = affine(0)(data).clone()
        return data["out"].copy_(cache["value"])

    assert not check_correctness(AffineTask(), cached_copy, CASE).passed


def test_kernel_that_raises_is_a_one_line_failure():
    def broken(data):
        raise RuntimeError("boom\nsecond line")

    result = check_correctness(AffineTask(), broken, CASE)
    assert not result.passed and "RuntimeError: boom" in result.message and "\n" not in result.message


def test_transpose_task_skipped_tiles_from_a_non_bijective_order():
    task = load_task("transpose")
    skipping = parse_formula("pid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = (pid % num_pid_n) // 2 * 2\n")
    case = task.cases("tests")[0]
    bad = check_correctness(task, lambda data: task.custom_kernel(data, skipping), case)
    assert not bad.passed
    assert bad.runs[0].n_poisoned > 0 and "still hold NaN" in bad.message
    good = check_correctness(task, lambda data: task.custom_kernel(data, task.parse_order("grouped:GROUP_M=2")), case)
    assert good.passed, good.message


def test_run_tests_records_order_and_permutation_id():
    task = load_task("transpose")
    candidate = make_candidate(task, None, "grouped:GROUP_M=2")
    results = run_tests(task, candidate)
    assert all(r.passed for r in results), [r.message for r in results]
    assert len(results[0].order["permutation_id"]) == 16
    assert results[0].order["grid"] == list(task.tile_grid(results[0].case))


def test_poison_values_and_counting():
    floats = torch.zeros(4, 3)
    poison_(floats)
    assert torch.isnan(floats).all()
    ints = torch.zeros(5, dtype=torch.int32)
    poison_(ints)
    assert (ints == INT_POISON).all()
    assert poison_value(torch.int8) == -128 and poison_value(torch.uint8) == 255
    ints[2] = 7
    count, first = count_poisoned(ints, torch.int32)
    assert count == 4 and first == (0,)
    assert count_poisoned(torch.ones(3), torch.float32) == (0, None)


def test_derive_seed_is_reproducible_and_different():
    assert derive_seed(11, "ranked") == derive_seed(11, "ranked")
    assert derive_seed(11, "ranked") != 11 and derive_seed(11, "ranked") != derive_seed(11, "recheck")
    assert case_sizes({"seed": 1, "m": 2}) == {"m": 2}


def test_submission_loading_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_submission(tmp_path / "missing.py")
    no_kernel = tmp_path / "no_kernel.py"
    no_kernel.write_text("x = 1\n")
    with pytest.raises(UserError, match="defines no custom_kernel"):
        load_submission(no_kernel)
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(UserError, match="failed to import") as info:
        load_submission(broken)
    assert "\n" not in str(info.value)


def test_submission_runs_and_order_needs_an_order_parameter(tmp_path):
    task = load_task("transpose")
    sub = tmp_path / "sub.py"
    sub.write_text("def custom_kernel(data):\n    return data['out'].copy_(data['x'].t())\n")
    candidate = make_candidate(task, str(sub))
    assert check_correctness(task, candidate.fn, task.cases("tests")[1]).passed
    with pytest.raises(UserError, match="takes `order`"):
        make_candidate(task, str(sub), "grouped:GROUP_M=2")
