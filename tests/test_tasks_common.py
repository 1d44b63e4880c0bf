"""Every built-in task, through the registry, under the interpreter: test cases pass with the default and
swizzled orders, the output lands in data["out"], the library baseline agrees, a non-bijective order fails.

Task-specific checks (input structure, tolerances, GPU configs) stay in tests/test_task_<name>.py.
"""

import pytest
import torch

from swizzlelab.swizzle import parse_formula
from swizzlelab.tasks import builtin_names, load_task

ORDERS_BY_RANK = {
    2: ["grouped:GROUP_M=2", "column_major", "xcd:NUM_XCDS=4+grouped:GROUP_M=3", "hilbert:SIDE=4"],
    1: ["xcd:NUM_XCDS=3", "xcd:NUM_XCDS=8"],
}
# Every program runs the first tile (2-D) or program 0's work (1-D): the rest of the output is never written.
COLLAPSE = {
    2: parse_formula("pid = tl.program_id(0)\npid_m = pid * 0\npid_n = pid * 0\n"),
    1: parse_formula("pid = tl.program_id(0)\npid = pid * 0\n"),
}


def _rank(task) -> int:
    return len(task.tile_grid(task.cases("tests")[0]))


def _case_params():
    for name in builtin_names():
        task = load_task(name)
        for index, case in enumerate(task.cases("tests")):
            yield pytest.param(name, case, id=f"{name}-{index}")


def _order_params():
    for name in builtin_names():
        task = load_task(name)
        for spec in ORDERS_BY_RANK[_rank(task)]:
            yield pytest.param(name, spec, id=f"{name}-{spec}")


@pytest.mark.parametrize("name, case", list(_case_params()))
def test_test_cases_pass_with_the_default_order(name, case):
    task = load_task(name)
    data = task.generate_input(case)
    out = task.custom_kernel(data)
    assert out.data_ptr() == data["out"].data_ptr(), "the kernel must write into data['out']"
    result = task.check(data, out)
    assert result.ok, result.message


@pytest.mark.parametrize("name, spec", list(_order_params()))
def test_test_cases_pass_with_swizzled_orders(name, spec):
    task = load_task(name)
    order = task.parse_order(spec)
    for case in task.cases("tests"):
        data = task.generate_input(case)
        result = task.check(data, task.custom_kernel(data, order))
        assert result.ok, f"{spec} on {task.case_label(case)}: {result.message}"


@pytest.mark.parametrize("name", builtin_names())
def test_baseline_matches_reference(name):
    task = load_task(name)
    for case in task.cases("tests"):
        data = task.generate_input(case)
        result = task.check(data, task.baseline(data))
        assert result.ok, result.message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # reductions may read partials nobody wrote
@pytest.mark.parametrize("name", builtin_names())
def test_non_bijective_order_is_caught_by_check(name):
    task = load_task(name)
    case = max(task.cases("tests"), key=task.n_programs)
    assert task.n_programs(case) > 1
    data = task.generate_input(case)
    result = task.check(data, task.custom_kernel(data, COLLAPSE[_rank(task)]))
    assert not result.ok and result.message


def test_every_task_has_test_and_benchmark_cases():
    for name in builtin_names():
        task = load_task(name)
        assert task.cases("tests") and task.cases("benchmarks"), name
        assert torch.is_tensor(task.generate_input(task.cases("tests")[0])["out"])
