"""Each task's analytic access model (access.py) against the interpreter trace of its real kernel.

Exact equality per tile and step (tensor, line, sectors, read/write) on every test case and on small sizes
with the GPU configuration (the one the benchmarks and the simulator's predictions use).
"""

from __future__ import annotations

import importlib
import time

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.tasks.registry import builtin_names, load_task
from swizzlelab.trace import AccessTrace, compare_footprints, compare_traces, trace_call

# kernel name of the launch the model describes (tasks with a second, merge launch)
MODELLED_LAUNCH = {"lean_attention": "lean_attention_kernel"}
# small cases run with each task's GPU_CONFIG through the interpreter
GPU_CONFIG_CASES = {
    "matmul": {"seed": 5, "m": 300, "n": 200, "k": 160},
    "transpose": {"seed": 5, "m": 130, "n": 200, "dtype": "float16"},
    "flash_attention": {"seed": 5, "batch": 1, "heads": 2, "seq": 200, "head_dim": 128},
    "lean_attention": {"seed": 5, "batch": 2, "heads": 8, "kv_heads": 2, "head_dim": 128, "min_ctx": 40,
                       "max_ctx": 300, "n_programs": 6},
    "spmv": {"seed": 5, "rows": 60, "cols": 500, "avg_nnz": 40, "communities": 4},
    "histogram": {"seed": 5, "rows": 9000, "channels": 40},
}
# models that need the case's seed (their access pattern depends on the generated data)
NEEDS_SEED = ("lean_attention", "spmv")



def _modelled_tasks() -> list[str]:
    return [name for name in builtin_names() if load_task(name).has_access_model]


def _traced(task, case, config=None) -> AccessTrace:
    config = config or task.kernel.CPU_CONFIG
    data = task.generate_input(case)
    grid = task.tile_grid(case, config)
    # traced in the identity order (program i is tile i); matmul's own site is the grouped order
    identity = task.parse_order("identity" if task.spec.grid_rank == 2 else "identity1d")
    return trace_call(lambda: task.custom_kernel(data, identity, config), grid,
                      kernel_name=MODELLED_LAUNCH.get(task.name))


def _model(task, case, config=None, **options) -> AccessTrace:
    if task.name == "histogram":
        options.setdefault("per_channel_loads", True)  # the exact, unmerged form
    # access models default to the GPU configuration; the interpreter tests use the small CPU one
    options["config"] = config or task.kernel.CPU_CONFIG
    return task.access_model(case, **options)


TEST_CASES = [(name, i) for name in _modelled_tasks() for i in range(len(load_task(name).cases("tests")))]


@pytest.mark.parametrize("name,index", TEST_CASES, ids=[f"{n}-{i}" for n, i in TEST_CASES])
def test_model_equals_trace_on_test_cases(name, index):
    task = load_task(name)
    case = task.cases("tests")[index]
    model, traced = _model(task, case), _traced(task, case)
    diff = compare_traces(model, traced)
    assert diff.equal, diff.message
    assert model.n_accesses == traced.n_accesses > 0
    assert model.meta["source"] == "model" and traced.meta["source"] == "traced"


@pytest.mark.parametrize("name", sorted(set(GPU_CONFIG_CASES) & set(_modelled_tasks())))
def test_model_equals_trace_with_gpu_config(name):
    task = load_task(name)
    config = task.kernel.GPU_CONFIG
    case = GPU_CONFIG_CASES[name]
    diff = compare_traces(_model(task, case, config), _traced(task, case, config))
    assert diff.equal, diff.message


def test_models_report_a_difference():
    # the comparison itself must fail on a wrong model: shift one access of the matmul model
    task = load_task("matmul")
    case = task.cases("tests")[0]
    model = _model(task, case)
    model.lines[5] += 1
    diff = compare_traces(model, _traced(task, case))
    assert not diff.equal and "tile 0" in diff.message


def test_models_default_to_the_gpu_config():
    for name in _modelled_tasks():
        task = load_task(name)
        case = task.cases("tests")[0]
        assert task.access_model(case).grid == task.tile_grid(case, task.kernel.GPU_CONFIG)


def test_matmul_model_counts_at_gpu_config():
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    trace = task.access_model({"seed": 0, "m": 1024, "n": 512, "k": 256}, config=config)
    assert trace.grid == (8, 4) and trace.steps_per_tile().tolist() == [4] * 32
    # per tile and step: A 128 rows x 128 bytes (1 line), B 64 rows x 256 bytes (2 lines); C 128 x 2 lines at the end
    assert trace.n_accesses == 32 * (4 * (128 + 128) + 256)
    assert trace.footprint_bytes_by_tensor() == {"a_ptr": 1024 * 256 * 2, "b_ptr": 256 * 512 * 2, "c_ptr": 1024 * 512 * 2}


def test_lean_context_lengths_match_reference():
    task = load_task("lean_attention")
    access = importlib.import_module("swizzlelab.tasks.lean_attention.access")
    for case in task.cases("tests"):
        data = task.generate_input(case)
        lens = access.context_lengths(case["seed"], case["batch"], case["min_ctx"], case["max_ctx"])
        assert lens.tolist() == data["ctx_lens"].cpu().tolist()


@pytest.mark.parametrize("name", NEEDS_SEED)
def test_data_dependent_models_need_seed(name):
    task = load_task(name)
    # the registry passes the case's seed along; called without it, the model says what it needs
    with pytest.raises(UserError, match="seed"):
        task.access.access_model(**task.sizes(task.cases("tests")[0]))


def test_histogram_merged_loads_keep_each_tile_footprint():
    task = load_task("histogram")
    for case in task.cases("tests"):
        merged = _model(task, case, per_channel_loads=False)
        exact = _model(task, case)
        assert merged.n_accesses < exact.n_accesses
        diff = compare_footprints(merged, _traced(task, case))
        assert diff.equal, diff.message


def test_matmul_8192_model_is_fast_and_exact_in_size():
    task = load_task("matmul")
    start = time.perf_counter()
    trace = task.access_model({"seed": 0, "m": 8192, "n": 8192, "k": 8192}, config=task.kernel.GPU_CONFIG)
    elapsed_s = time.perf_counter() - start
    assert trace.n_tiles == 4096 and trace.n_steps == 4096 * 128
    assert trace.n_accesses == 4096 * (128 * 256 + 256)
    assert elapsed_s < 60
    # every A line of row panel 0 is read by the 64 tiles of tile row 0, once per tile
    a = trace.tensor("a_ptr")
    assert np.count_nonzero(trace.lines[: trace.tile_access_range(63)[1]] < a.base_line + 128 * 128) == 64 * 128 * 128
