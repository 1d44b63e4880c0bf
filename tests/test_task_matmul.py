"""Task `matmul`: task-specific checks; every-task checks (cases, orders, baseline) are in test_tasks_common.py."""

import torch

from swizzlelab.tasks import load_task

TASK = load_task("matmul")


def test_sizes_cover_partial_tiles_and_k_tails():
    cfg = TASK.kernel.CPU_CONFIG
    cases = TASK.cases("tests")
    assert any(c["m"] % cfg.block_m for c in cases) and any(c["n"] % cfg.block_n for c in cases)
    assert any(c["k"] % cfg.block_k for c in cases)


def test_inputs_are_seeded_scaled_and_poisoned():
    case = TASK.cases("tests")[0]
    first, again = TASK.generate_input(case), TASK.generate_input(case)
    assert torch.equal(first["a"], again["a"]) and torch.equal(first["b"], again["b"])
    assert not torch.equal(first["a"], TASK.generate_input({**case, "seed": 99})["a"])
    ref = TASK.ref_kernel(first).float()
    assert 0.5 < ref.std() < 2.0, "outputs are scaled to ~N(0, 1) whatever K is"
    assert torch.isnan(first["out"]).all()


def test_check_tolerance_accepts_rounding_rejects_errors():
    data = TASK.generate_input(TASK.cases("tests")[0])
    out = TASK.custom_kernel(data).clone()
    nudged = out.clone()
    nudged[2, 3] = (nudged[2, 3].float() * (1 + 2e-3)).half()  # about two fp16 ulps
    assert TASK.check(data, nudged).ok
    broken = out.clone()
    broken[2, 3] += 0.25
    result = TASK.check(data, broken)
    assert not result.ok and result.worst_index == (2, 3) and "1 of 1961" in result.message


def test_gpu_benchmarks_use_the_validated_config():
    gpu = TASK.kernel.GPU_CONFIG
    assert (gpu.block_m, gpu.block_n, gpu.block_k, gpu.num_warps, gpu.num_stages) == (128, 128, 64, 8, 3)
    grids = [TASK.tile_grid(c, gpu) for c in TASK.cases("benchmarks")]
    assert grids == [(32, 32), (64, 64), (128, 128)]
    args, consts = TASK.swizzle_args(TASK.cases("benchmarks")[0], gpu)
    assert args["M"] == args["N"] == args["K"] == 4096 and consts["BLOCK_K"] == 64
