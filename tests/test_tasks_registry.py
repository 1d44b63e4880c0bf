"""The task registry: discovery, task.yml validation, loading a user's folder by path, the `tasks` command."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swizzlelab.errors import UserError
from swizzlelab.tasks import builtin_names, list_tasks, load_spec, load_task
from swizzlelab.tasks.checking import Tolerance, compare

MINE = ("transpose", "matmul", "histogram", "spmv")


def test_my_tasks_are_registered_with_complete_specs():
    names = builtin_names()
    for name in MINE:
        assert name in names
        task = load_task(name)
        assert task.name == name and task.path.name == name
        assert task.spec.tests and task.spec.benchmarks
        assert task.spec.ranking == "geometric_mean"
        for case in task.cases("tests") + task.cases("benchmarks"):
            assert len(task.tile_grid(case)) == task.spec.grid_rank
            args, consts = task.swizzle_args(case)
            assert isinstance(args, dict) and isinstance(consts, dict)


def test_list_tasks_is_sorted_and_loaded():
    tasks = list_tasks()
    assert [t.name for t in tasks] == sorted(t.name for t in tasks)
    assert {t.name for t in tasks} >= set(MINE)


def test_unknown_task_lists_known_ones():
    with pytest.raises(UserError, match=r"unknown task 'no_such_task': known tasks are .*transpose"):
        load_task("no_such_task")


def test_folder_without_spec_is_rejected(tmp_path):
    with pytest.raises(UserError, match="no task.yml"):
        load_task(tmp_path)


def _user_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "my_transpose"
    src = load_task("transpose").path
    folder.mkdir()
    for name in ("task.yml", "reference.py", "kernel.py"):
        shutil.copy(src / name, folder / name)
    return folder


def test_user_folder_loads_by_path_and_runs(tmp_path):
    folder = _user_copy(tmp_path)
    task = load_task(str(folder))
    assert task.name == "my_transpose" and task.path == folder.resolve()
    assert task.kernel.__name__.startswith("swizzlelab_user_task_")
    case = task.cases("tests")[0]
    data = task.generate_input(case)
    assert task.check(data, task.custom_kernel(data, task.parse_order("column_major"))).ok
    assert load_task(folder / "task.yml").kernel is task.kernel  # same folder -> same modules
    assert not task.has_access_model
    with pytest.raises(UserError, match="no analytic access model"):
        task.access_model(case)


def test_access_model_gets_the_seed_for_data_dependent_tasks():
    task = load_task("spmv")
    case = task.cases("tests")[0]
    trace = task.access_model(case)
    assert trace.grid == task.tile_grid(case)


def test_user_folder_with_broken_module_gives_one_line(tmp_path):
    folder = _user_copy(tmp_path)
    (folder / "kernel.py").write_text("def custom_kernel(:\n")
    with pytest.raises(UserError, match=r"cannot import .*kernel.py: SyntaxError"):
        load_task(folder)


def test_user_folder_missing_function(tmp_path):
    folder = _user_copy(tmp_path)
    text = (folder / "reference.py").read_text().replace("def baseline(", "def not_baseline(")
    (folder / "reference.py").write_text(text)
    with pytest.raises(UserError, match="lacks baseline"):
        load_task(folder)


SPEC_OK = """
description: a task
tests: [{seed: 1, n: 5}]
benchmarks: [{seed: 2, n: 500}]
tolerance: {rtol: 0.01, atol: 0}
ranking: geometric_mean
swizzle: {grid_rank: 1, default_order: launch order}
"""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("ranking: geometric_mean", "ranking: mean"), "ranking 'mean' is not supported"),
        (lambda s: s.replace("grid_rank: 1", "grid_rank: 3"), "grid_rank: 1 or 2"),
        (lambda s: s.replace("{seed: 1, n: 5}", "{n: 5}"), r"tests\[0\] needs an integer seed"),
        (lambda s: s.replace("tests: [{seed: 1, n: 5}]", "tests: []"), "tests must be a non-empty list"),
        (lambda s: s.replace("{rtol: 0.01, atol: 0}", "{rtol: 0.01}"), "exactly rtol and atol"),
        (lambda s: s.replace("{rtol: 0.01, atol: 0}", "{rtol: -1, atol: 0}"), "must be >= 0"),
        (lambda s: s + "tolerence: 1\n", "unknown key"),
        (lambda s: s.replace("description: a task\n", ""), "lacks description"),
        (lambda s: s + "  - [\n", "not valid YAML"),
    ],
)
def test_spec_validation(tmp_path, edit, message):
    spec_path = tmp_path / "task.yml"
    spec_path.write_text(SPEC_OK)
    assert load_spec(spec_path).tolerance == Tolerance(rtol=0.01, atol=0.0)
    spec_path.write_text(edit(SPEC_OK))
    with pytest.raises(UserError, match=message):
        load_spec(spec_path)


def test_compare_reports_type_shape_dtype_and_nan():
    import torch

    want = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tol = Tolerance(rtol=0.0, atol=0.5)
    assert compare(want + 0.4, want, tol).ok
    assert "returned list" in compare([1, 2], want, tol).message
    assert "shape (3, 2)" in compare(want.t().contiguous(), want, tol).message
    assert "dtype torch.float16" in compare(want.half(), want, tol).message
    poisoned = want.clone()
    poisoned[1, 2] = float("nan")
    result = compare(poisoned, want, tol)
    assert not result.ok and result.n_bad == 1 and result.worst_index == (1, 2) and "got nan" in result.message
    ints = torch.tensor([3, 4, 5], dtype=torch.int32)
    result = compare(ints + torch.tensor([0, 2, 0], dtype=torch.int32), ints, Tolerance(0.0, 0.0))
    assert not result.ok and result.n_bad == 1 and result.max_abs_err == 2 and result.worst_index == (1,)


def test_tasks_command_lists_and_describes():
    from swizzlelab.cli import app

    runner = CliRunner()
    listing = runner.invoke(app, ["tasks"], terminal_width=200)
    assert listing.exit_code == 0, listing.output
    for name in MINE:
        assert name in listing.output
    shown = runner.invoke(app, ["tasks", "transpose"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "256x256" in shown.output  # the GPU tile grid of the 16384^2 benchmark
    missing = runner.invoke(app, ["tasks", "no_such_task"])
    assert missing.exit_code != 0 and isinstance(missing.exception, UserError)


@pytest.mark.parametrize("name", builtin_names())
def test_every_seed_of_a_case_gives_inputs_of_the_same_sizes(name):
    """The isolated evaluator binds a case's buffers once and loads a fresh seed into them for every timed call:
    a task whose array sizes follow the seed (spmv's nnz did) cannot be ranked."""
    import torch

    from swizzlelab.harness.correctness import case_sizes

    task = load_task(name)
    for case in task.cases("tests"):
        shapes = [{k: tuple(v.shape) for k, v in task.generate_input({"seed": seed, **case_sizes(case)}).items()
                   if isinstance(v, torch.Tensor) and not v.is_sparse_csr}
                  for seed in (int(case["seed"]), int(case["seed"]) + 101, 7919)]
        assert shapes[0] == shapes[1] == shapes[2], (name, case)
