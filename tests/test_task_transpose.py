"""Task `transpose`: task-specific checks; every-task checks (cases, orders, baseline) are in test_tasks_common.py."""

import torch

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
    assert args == {"m": 16384, "n": 16384} and consts == {"BLOCK_M": 64, "BLOCK_N": 64}
