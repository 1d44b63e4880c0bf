"""The barrier between waves (tasks/matmul sync_wave; simulate(wave_sync=W); --wave-sync): the kernel stays correct,
the simulator runs each wave after the previous one, the option reaches predictions and refuses what has none."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.scenario import load_scenario
from swizzlelab.sim import CacheGeometry, Engine, SimParams, simulate
from swizzlelab.sim.params import Progress
from swizzlelab.sim.schedule import domain_schedules
from swizzlelab.swizzle import family, to_permutation
from swizzlelab.tasks import load_task
from swizzlelab.tasks.matmul.kernel import CPU_CONFIG, with_k_alternation, with_wave_sync
from tests.test_cli_user_errors import SMALL_MATMUL, cli, one_error_line
from tests.test_sim import tiny_model
from tests.test_sim_engines import schedule_run

KB = 1024


def test_matmul_kernel_with_a_barrier_between_waves_is_correct():
    # Under the interpreter programs run one by one, so the barrier never waits; the output must still be right
    # with waves that split the 30 tiles unevenly, alone and with the K alternation.
    task = load_task("matmul")
    data = task.generate_input({"seed": 3, "m": 96, "n": 80, "k": 64})
    order = task.parse_order("hilbert:SIDE=2")
    for cfg in (with_wave_sync(CPU_CONFIG, 7), with_wave_sync(with_k_alternation(CPU_CONFIG, 4), 4)):
        data["out"].fill_(float("nan"))
        assert task.check(data, task.custom_kernel(data, order, cfg)).ok, cfg


def test_syncedschedule_runs_each_wave_after_the_previous_one():
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 6, size=50)
    tile_step_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    step_ptr = np.arange(tile_step_ptr[-1] + 1, dtype=np.int64)
    order = rng.permutation(counts.size)
    position = np.empty(counts.size, dtype=np.int64)
    position[order] = np.arange(counts.size)
    tile_of_step = np.repeat(np.arange(counts.size), counts)
    chunk = 8
    run = schedule_run(step_ptr, tile_step_ptr, get_model("h100"), Progress("random_walk", 0.5, 5), wave_chunk=chunk)
    steps, _, starts = domain_schedules(run, [(0, order)])[0]
    waves = position[tile_of_step[steps]] // chunk
    assert np.all(np.diff(waves) >= 0) and waves[-1] == (counts.size - 1) // chunk  # wave by wave, every wave
    for w in range(1, waves[-1] + 1):  # a wave's steps start after every step of the previous wave has started
        assert starts[waves == w].min() > starts[waves == w - 1].max()
    assert np.array_equal(np.sort(steps), np.arange(counts.sum()))  # every step exactly once


def test_wave_sync_in_the_simulator():
    task = load_task("matmul")
    case = {"m": 512, "n": 512, "k": 256}
    config = task.kernel.CPU_CONFIG
    trace = task.access_model(case, config=config)
    perm = to_permutation(family("grouped", GROUP_M=4), task.tile_grid(case, config),
                          *task.swizzle_args(case, config)).perm
    model = replace(get_model("h100"), l2_bytes_per_domain=96 * KB, l2_effective_bytes_per_domain=96 * KB)
    # wave_sync runs the random walk (the saturating model does not model the barrier), so the plain run does too.
    plain = replace(simulate(trace, perm, model, SimParams(progress="random_walk"), "sets", occupancy=2), elapsed_s=0.0)
    # one wave as large as the launch: the same run as without the barrier
    whole = simulate(trace, perm, model, occupancy=2, engine="sets", wave_sync=perm.size)
    assert replace(whole, elapsed_s=0.0, wave_sync=0) == plain and whole.wave_sync == perm.size
    synced = simulate(trace, perm, model, occupancy=2, engine="sets", wave_sync=264)
    assert synced.wave_sync == 264 and synced.dram_read_bytes != plain.dram_read_bytes
    assert replace(simulate(trace, perm, model, engine=Engine("sets", workers=1), occupancy=2, wave_sync=264),
                   elapsed_s=0.0) == replace(synced, elapsed_s=0.0)
    for bad, reason in [(-1, "whole number"), (2.5, "whole number"), (True, "whole number")]:
        with pytest.raises(UserError, match=reason):
            simulate(trace, perm, model, occupancy=2, wave_sync=bad)
    with pytest.raises(UserError, match="set-partitioned engine"):
        simulate(trace, perm, model, geometry=CacheGeometry(None), occupancy=2, wave_sync=264)
    with pytest.raises(UserError, match="split evenly"):
        simulate(trace, perm, tiny_model(64, units=4, domains=3, partitions=2), occupancy=2, wave_sync=4)


def test_wave_sync_reaches_the_scenario_and_refuses_what_has_no_barrier():
    case = {"seed": 4, "m": 256, "n": 256, "k": 512}
    plain = load_scenario("matmul", case, target="h100", occupancy=2)
    synced = load_scenario("matmul", case, target="h100", occupancy=2, k_dir="alternate", wave_sync=True)
    assert plain.wave_sync == 0 and synced.wave_sync == 264 and synced.identity()["sync_wave"] == 264
    assert "sync_wave" not in plain.identity() and synced.kernel_key() != plain.kernel_key()
    assert synced.launch_config().sync_wave == 264 and synced.launch_config().k_wave == 264
    assert "starting after the previous one" in synced.header()
    with pytest.raises(UserError, match="no barrier between waves"):
        load_scenario("histogram", None, target="h100", wave_sync=True)


@pytest.mark.parametrize("argv, reason", [
    (["simulate", "histogram", "--wave-sync"], "no barrier between waves"),
    (["simulate", "--kernel", "tests/wild/tutorial_matmul.py", "--wave-sync"], "not to a --kernel file"),
    (["optimize", "--kernel", "tests/wild/tutorial_matmul.py", "--wave-sync"], "not to a --kernel file"),
])
def test_wave_sync_refusals_are_one_line(argv, reason, monkeypatch, capsys) -> None:
    assert reason in one_error_line(*cli(argv, monkeypatch, capsys)[::2])


def test_wave_sync_is_in_the_simulate_record(monkeypatch, capsys) -> None:
    import json

    records = []
    for extra in ([], ["--wave-sync"]):
        code, out, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100", "--json", "--assoc", "16",
                            *extra], monkeypatch, capsys)
        assert code == 0
        records.append(json.loads(out)["orders"][0])
    assert records[0]["wave_sync"] == 0 and records[1]["wave_sync"] == 264
