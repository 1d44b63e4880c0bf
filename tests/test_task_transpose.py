"""Task `transpose`: task-specific checks; every-task checks (cases, orders, baseline) are in test_tasks_common.py."""


import numpy as np
import pytest
import torch

from swizzlelab.errors import UserError
from swizzlelab.scenario import load_scenario
from swizzlelab.tasks import load_task

TASK = load_task("transpose")

def test_sizes_cover_partial_tiles():
    cfg = TASK.kernel.CPU_CONFIG
    assert any(c["m"] % cfg.block_m or c["n"] % cfg.block_n for c in TASK.cases("tests"))
    assert {c["dtype"] for c in TASK.cases("tests")} == {"float16", "float32"}


def test_inputs_are_seeded_and_not_constant():
    case = TASK.cases("tests")[0]
    first, again = TASK.generate_input(case), TASK.generate_input(case)
    other = TASK.generate_input({**case, "seed": case["seed"] + 100})
    assert torch.equal(first["x"], again["x"])
    assert not torch.equal(first["x"], other["x"])
    assert first["x"].std() > 0.5
    assert torch.isnan(first["out"]).all(), "the output buffer starts poisoned, so unwritten tiles fail"


def test_check_rejects_one_wrong_element():
    case = TASK.cases("tests")[1]
    data = TASK.generate_input(case)
    out = TASK.custom_kernel(data)
    out[5, 7] += 1
    result = TASK.check(data, out)
    assert not result.ok
    assert result.n_bad == 1 and result.worst_index == (5, 7)
    assert "1 of" in result.message and "(5, 7)" in result.message


def test_tile_grid_and_swizzle_args_of_gpu_benchmark():
    gpu = TASK.kernel.GPU_CONFIG
    bench = TASK.cases("benchmarks")[0]
    assert TASK.tile_grid(bench, gpu) == (16384 // 64, 16384 // 64)
    args, consts = TASK.swizzle_args(bench, gpu)
    assert args == {"M": 16384, "N": 16384, "stride_in_m": 16384, "stride_in_n": 1, "stride_out_m": 1,
                    "stride_out_n": 16384}
    assert consts == {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64}


def test_a_case_sets_the_tile_and_the_original_shape_is_a_benchmark():
    gpu = TASK.kernel.GPU_CONFIG
    sub_line = [c for c in TASK.cases("benchmarks") if c.get("tile_m") == 32 and c.get("tile_n") == 32]
    assert sub_line and sub_line[0]["dtype"] == "float16", "32 x 32 fp16 tiles: half a 128-byte line per row"
    assert TASK.tile_grid(sub_line[0], gpu) == (128, 128)
    assert TASK.swizzle_args({"m": 100, "n": 40, "tile_m": 16, "tile_n": 8}, gpu)[1] == {
        "BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 8}
    with pytest.raises(UserError, match="tile_m must be a power of two"):
        TASK.tile_grid({"m": 64, "n": 64, "tile_m": 24}, gpu)
    with pytest.raises(UserError, match="at most 65535 programs on axis 1"):
        TASK.tile_grid({"m": 8, "n": 65536 * 4, "tile_n": 2}, gpu)


def test_the_kernel_launches_its_tile_grid_two_d_and_its_own_order_runs_down_tile_columns():
    scenario = load_scenario("transpose", {"seed": 1, "m": 96, "n": 64, "dtype": "float16"}, target="mi300x",
                             config="cpu", gpu_name="")
    assert scenario.grid == (6, 4) and scenario.site.launch_rank == 2
    launch = np.arange(24)
    # axis 0 fastest: launch index i runs tile (i % 6, i // 6), row-major tile index (i % 6) * 4 + i // 6
    assert scenario.permutation(None).perm.tolist() == ((launch % 6) * 4 + launch // 6).tolist()
