"""Task `histogram`: every test case passes under the interpreter, with the default and swizzled orders."""

import pytest
import torch

from swizzlelab.swizzle import family, parse_formula
from swizzlelab.tasks import load_task

TASK = load_task("histogram")
ORDERS = {
    "default": None,
    "grouped": family("grouped", GROUP_M=2),
    "column_major": family("column_major"),
    "xcd+grouped": TASK.parse_order("xcd:NUM_XCDS=4+grouped:GROUP_M=3"),
}


@pytest.mark.parametrize("case", TASK.cases("tests"), ids=TASK.case_label)
@pytest.mark.parametrize("order_name", list(ORDERS))
def test_cases_pass_with_each_order(case, order_name):
    data = TASK.generate_input(case)
    out = TASK.custom_kernel(data, ORDERS[order_name])
    assert out.data_ptr() == data["out"].data_ptr()
    assert out.dtype == torch.int32 and out.shape == (case["channels"], 256)
    result = TASK.check(data, out)
    assert result.ok, result.message
    assert int(out.sum()) == case["rows"] * case["channels"]


def test_baseline_matches_reference():
    for case in TASK.cases("tests"):
        data = TASK.generate_input(case)
        assert TASK.check(data, TASK.baseline(data)).ok


def test_sizes_cover_partial_tiles():
    cfg = TASK.kernel.CPU_CONFIG
    cases = TASK.cases("tests")
    assert any(c["rows"] % cfg.rows_per_prog for c in cases) and any(c["channels"] % cfg.block_c for c in cases)
    assert any(c["rows"] > cfg.rows_per_prog for c in cases), "some program must loop over several row chunks"


def test_inputs_are_seeded_uneven_and_poisoned():
    case = {"seed": 5, "rows": 4000, "channels": 6}
    first, again = TASK.generate_input(case), TASK.generate_input(case)
    assert torch.equal(first["x"], again["x"])
    assert not torch.equal(first["x"], TASK.generate_input({**case, "seed": 6})["x"])
    counts = TASK.ref_kernel(first)
    assert counts.sum() == 4000 * 6
    # Channels differ in where their mass lies, and no channel is uniform noise.
    assert len({int(c.argmax()) for c in counts}) > 1
    assert int(counts.max()) > 4 * 4000 // 256
    assert (first["out"] == -1).all()


def test_non_bijective_order_is_caught_by_check():
    collapse = parse_formula("pid = tl.program_id(0)\npid_m = pid * 0\npid_n = pid * 0\n", ("pid_m", "pid_n"))
    data = TASK.generate_input(TASK.cases("tests")[0])
    result = TASK.check(data, TASK.custom_kernel(data, collapse))
    assert not result.ok and result.n_bad > 0


def test_check_rejects_one_miscount():
    data = TASK.generate_input(TASK.cases("tests")[0])
    out = TASK.custom_kernel(data).clone()
    out[3, 100] += 1
    result = TASK.check(data, out)
    assert not result.ok and result.n_bad == 1 and result.worst_index == (3, 100)
    assert "worst at (3, 100)" in result.message


def test_gpu_benchmark_grid():
    gpu = TASK.kernel.GPU_CONFIG
    bench = TASK.cases("benchmarks")[0]
    assert (bench["rows"], bench["channels"]) == (1048576, 512)
    assert TASK.tile_grid(bench, gpu) == (128, 16)
    args, consts = TASK.swizzle_args(bench, gpu)
    assert args == {"n_rows": 1048576, "n_channels": 512} and consts["BLOCK_C"] == 32
