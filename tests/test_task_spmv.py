"""Task `spmv`: task-specific checks; every-task checks (cases, orders, baseline) are in test_tasks_common.py."""

import pytest
import torch

from swizzlelab.tasks import load_task

TASK = load_task("spmv")


def test_matrix_structure():
    case = {"seed": 7, "rows": 4000, "cols": 8000, "avg_nnz": 16, "communities": 8}
    data = TASK.generate_input(case)
    row_ptr, col_idx = data["row_ptr"].long(), data["col_idx"].long()
    lengths = row_ptr.diff()
    assert row_ptr[0] == 0 and row_ptr[-1] == col_idx.numel()
    assert 13 < lengths.float().mean() < 19, "lognormal lengths with the requested mean"
    assert lengths.max() > 5 * 16, "a heavy tail of long rows"
    rows = torch.repeat_interleave(torch.arange(4000), lengths)
    width = 8000 // 8
    assert torch.equal(col_idx // width, rows % 8), "each row draws from its community's column block"
    key = rows * 8000 + col_idx
    assert bool((key.diff() >= 0).all()), "columns are sorted within each row"
    again = TASK.generate_input(case)
    assert torch.equal(again["col_idx"], data["col_idx"]) and torch.equal(again["values"], data["values"])
    assert torch.isnan(data["out"]).all()


def test_empty_rows_are_written_as_zero():
    case = TASK.cases("tests")[0]
    data = TASK.generate_input(case)
    empty = data["row_ptr"].diff() == 0
    assert empty.any(), "the first test case is meant to contain empty rows"
    out = TASK.custom_kernel(data)
    assert bool((out[empty] == 0).all())


def test_check_rejects_one_wrong_row():
    data = TASK.generate_input(TASK.cases("tests")[1])
    out = TASK.custom_kernel(data).clone()
    out[7] += 0.05
    result = TASK.check(data, out)
    assert not result.ok and result.n_bad == 1 and result.worst_index == (7,)


def test_bad_communities_is_a_user_error():
    from swizzlelab.errors import UserError

    with pytest.raises(UserError, match="communities"):
        TASK.generate_input({"seed": 1, "rows": 4, "cols": 3, "avg_nnz": 2, "communities": 5})


def test_grid_and_args():
    bench = TASK.cases("benchmarks")[0]
    assert TASK.tile_grid(bench, TASK.kernel.GPU_CONFIG) == (4194304,)
    assert TASK.swizzle_args(bench, TASK.kernel.GPU_CONFIG) == ({"M": 4194304}, {"BLOCK": 32})
