"""K-direction transforms of a trace (swizzlelab.trace.kdir) against the interpreter trace of the probe kernel that
alternates K by wave (tests/kdir_probe.py), and against a plain per-step rebuild.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import kdir_probe as probe
from swizzlelab.errors import UserError
from swizzlelab.swizzle import apply_swizzle, to_permutation
from swizzlelab.tasks import load_task
from swizzlelab.trace import compare_traces, trace_call
from swizzlelab.trace.kdir import alternate_by_wave, reverse_steps



def _rebuilt(trace, flipped: set[int]):
    """The expected transform, step by step in Python: reads of flipped tiles in reverse step order, writes last."""
    lines, writes, step_ptr = [], [], [0]
    for tile in range(trace.n_tiles):
        steps = [(s, np.arange(trace.step_ptr[s], trace.step_ptr[s + 1]))
                 for s in range(trace.tile_step_ptr[tile], trace.tile_step_ptr[tile + 1])]
        if tile in flipped:
            moved = np.concatenate([idx[trace.is_write[idx]] for _, idx in steps])
            steps = [(s, idx[~trace.is_write[idx]]) for s, idx in reversed(steps)]
            steps[-1] = (steps[-1][0], np.concatenate([steps[-1][1], moved]))
        for _, idx in steps:
            lines.extend(trace.lines[idx].tolist())
            writes.extend(trace.is_write[idx].tolist())
            step_ptr.append(len(lines))
    return lines, writes, step_ptr


@pytest.mark.parametrize("flipped", [{1}, {0, 2, 3}, set(range(12))])
def test_reverse_steps_equals_a_per_step_rebuild(flipped):
    task = load_task("matmul")
    trace = task.access_model({"seed": 0, "m": 40, "n": 64, "k": 80}, config=task.kernel.CPU_CONFIG)
    assert trace.n_tiles == 12
    out = reverse_steps(trace, np.array(sorted(flipped)))
    lines, writes, step_ptr = _rebuilt(trace, flipped)
    assert out.lines.tolist() == lines and out.is_write.tolist() == writes and out.step_ptr.tolist() == step_ptr
    assert np.array_equal(out.tile_step_ptr, trace.tile_step_ptr) and out.n_accesses == trace.n_accesses
    # the same multiset of accesses, and an untouched tile keeps its exact order
    assert sorted(out.lines.tolist()) == sorted(trace.lines.tolist())
    if 5 not in flipped:
        assert np.array_equal(out.tile_lines(5), trace.tile_lines(5))
    assert reverse_steps(trace, np.array([], dtype=np.int64)) is trace


def test_alternate_by_wave_equals_the_probe_kernel_traced():
    """The probe kernel (odd waves walk K backwards) traced under the interpreter, identity order, ragged M."""
    task = load_task("matmul")
    case = {"seed": 3, "m": 40, "n": 64, "k": 80}
    cfg = task.kernel.CPU_CONFIG
    data = task.generate_input(case)
    a, b = data["a"], data["b"]
    out = torch.empty((case["m"], case["n"]), dtype=a.dtype)  # the tracer skips the arithmetic
    grid = task.tile_grid(case, cfg)
    kernel = apply_swizzle(probe.matmul_kdir_kernel, task.parse_order("identity"))
    wave = 5

    def launch():
        kernel[(grid[0] * grid[1],)](a, b, out, case["m"], case["n"], case["k"], a.stride(0), a.stride(1), b.stride(0),
                                     b.stride(1), out.stride(0), out.stride(1), BLOCK_M=cfg.block_m,
                                     BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, REVERSE=1, WAVE=wave)

    traced = trace_call(launch, grid)
    args, consts = task.swizzle_args(case, cfg)
    perm = to_permutation(task.parse_order("identity"), grid, args, consts)
    model = alternate_by_wave(task.access_model(case, config=cfg), perm, wave)
    diff = compare_traces(model, traced)
    assert diff.equal, diff.message
    # and the plain model is not equal to it: the transform is what makes them agree
    assert not compare_traces(task.access_model(case, config=cfg), traced).equal


def test_alternate_by_wave_rejects_bad_input():
    task = load_task("matmul")
    trace = task.access_model({"seed": 0, "m": 40, "n": 64, "k": 80}, config=task.kernel.CPU_CONFIG)
    with pytest.raises(UserError, match="12 tiles"):
        alternate_by_wave(trace, np.arange(5), 2)
    with pytest.raises(UserError, match="wave"):
        alternate_by_wave(trace, np.arange(12), -1)
    with pytest.raises(UserError, match="tile indices"):
        reverse_steps(trace, np.array([12]))
    assert alternate_by_wave(trace, np.arange(12), 0) is trace


def test_task_kernel_alternating_k_is_correct_and_traced_as_modelled():
    """The matmul task kernel's own K switch (config k_wave): right output under the interpreter in a swizzled
    order, and its recorded trace is the analytic one with odd waves reversed (Scenario.trace_for)."""
    from swizzlelab.scenario import load_scenario

    scenario = load_scenario("matmul", {"seed": 4, "m": 40, "n": 64, "k": 80}, config="cpu", k_dir="alternate",
                             occupancy=1, target="h100")
    assert scenario.config.k_wave == -1 and scenario.k_wave == scenario.model.n_units
    task = scenario.task
    cfg = replace(scenario.config, k_wave=5)  # a wave the 12-tile grid splits into odd and even waves
    data = task.generate_input(scenario.case)
    data["out"].fill_(float("nan"))
    order = task.parse_order("grouped:GROUP_M=2")
    assert task.check(data, task.custom_kernel(data, order, cfg)).ok
    traced = trace_call(lambda: task.custom_kernel(data, task.parse_order("identity"), cfg), scenario.grid)
    perm = scenario.permutation("identity")
    modelled = alternate_by_wave(task.access_model(scenario.case, config=cfg), perm, 5)
    diff = compare_traces(modelled, traced)
    assert diff.equal, diff.message
    # forwards (k_wave 0) the recorded trace is the plain analytic one, and differs from the alternating one
    forward = trace_call(lambda: task.custom_kernel(data, task.parse_order("identity"), replace(cfg, k_wave=0)),
                         scenario.grid)
    assert compare_traces(task.access_model(scenario.case, config=cfg), forward).equal
    assert not compare_traces(modelled, forward).equal


def test_k_dir_reaches_the_simulation_and_refuses_what_has_no_switch():
    from swizzlelab.scenario import load_scenario

    case = {"seed": 4, "m": 256, "n": 256, "k": 512}
    fwd = load_scenario("matmul", case, target="h100", occupancy=2)
    alt = load_scenario("matmul", case, target="h100", occupancy=2, k_dir="alternate")
    assert fwd.k_wave == 0 and alt.k_wave == 264 and "k_wave" in alt.identity() and "k_wave" not in fwd.identity()
    assert alt.kernel_key() != fwd.kernel_key()
    assert alt.launch_config().k_wave == 264 and fwd.launch_config() is fwd.config
    perm = fwd.permutation("grouped:GROUP_M=8")
    assert fwd.trace_for(perm) is fwd.trace
    # 64 tiles, fewer than one wave of 264: nothing runs backwards
    assert np.array_equal(alt.trace_for(perm).lines, alt.trace.lines)
    small = load_scenario("matmul", {**case, "m": 512}, target="h100", occupancy=2, k_dir="alternate", config="cpu")
    flipped = small.trace_for(small.permutation("grouped:GROUP_M=8"))
    assert small.k_wave == 264 and small.n_tiles > 264 and not np.array_equal(flipped.lines, small.trace.lines)
    with pytest.raises(UserError, match="K-direction switch"):
        load_scenario("histogram", None, target="h100", k_dir="alternate")
    with pytest.raises(UserError, match="--k-dir 'sideways' unknown"):
        load_scenario("matmul", case, target="h100", k_dir="sideways")
