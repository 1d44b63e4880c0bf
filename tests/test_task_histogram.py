"""Task `histogram`: input structure, partial tiles, miscount detection and GPU grid (shared checks in test_tasks_common)."""

import torch

from swizzlelab.tasks import load_task

TASK = load_task("histogram")


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
