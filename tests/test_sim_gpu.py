"""The GPU simulator backend gives the CPU engines' results exactly: under numba's CUDA simulator on any machine,
and on a real GPU where one is present (gpu-marked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import simulate
from swizzlelab.sim.gpu import choose_engine, unavailable_reason
from swizzlelab.swizzle import family, to_permutation
from swizzlelab.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]

# The child scripts' common start: what they import, and results compared without their run times.
CHILD_HEADER = r"""
import json, sys
from dataclasses import replace
import numpy as np
from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import CacheGeometry, Engine, SimParams, gpu as sim_gpu, simulate
from swizzlelab.swizzle import family, to_permutation
from swizzlelab.tasks import load_task
sys.path.insert(0, sys.argv[1])
from tests.test_sim import make_trace, tiny_model

def same(a, b):
    return replace(a, elapsed_s=0.0) == replace(b, elapsed_s=0.0)
"""


def under_cuda_simulator(body: str):
    """Run CHILD_HEADER + body in a child with numba's CUDA simulator (NUMBA_ENABLE_CUDASIM must be set before numba
    is imported, and this process imported it); the JSON of its last output line."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD_HEADER + body, str(ROOT)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


CHILD = r"""
out = []
for name, case, order, target, kb, assoc in [
    ("matmul", {"m": 384, "n": 256, "k": 256}, family("grouped", GROUP_M=2), "h100", 48, 4),
    ("transpose", {"m": 256, "n": 384, "dtype": "float16"}, family("diagonal"), "h100", 32, 4),
    ("matmul", {"m": 512, "n": 256, "k": 128}, family("column_major"), "mi300x", 16, 4),
    # the models' own 16 ways: the kernels compiled for their geometry
    ("matmul", {"m": 384, "n": 256, "k": 256}, family("grouped", GROUP_M=2), "h100", 64, 16),
    ("matmul", {"m": 512, "n": 256, "k": 128}, family("column_major"), "mi300x", 32, 16),
]:
    task = load_task(name)
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=config)
    args, consts = task.swizzle_args(case, config)
    perm = to_permutation(order, task.tile_grid(case, config), args, consts).perm
    model = get_model(target)
    small = replace(model, l2_bytes_per_domain=kb * 1024, l2_effective_bytes_per_domain=kb * 1024,
                    llc_bytes=min(model.llc_bytes, 64 * 1024))
    cpu = simulate(trace, perm, small, engine=Engine("sets", workers=2), geometry=CacheGeometry(assoc), occupancy=2)
    dev = simulate(trace, perm, small, engine="gpu", geometry=CacheGeometry(assoc), occupancy=2)
    part = simulate(trace, perm, small, engine=Engine("gpu", set_fraction=0.5), geometry=CacheGeometry(assoc),
                    occupancy=2)
    part_cpu = simulate(trace, perm, small, engine=Engine("sets", set_fraction=0.5), geometry=CacheGeometry(assoc),
                        occupancy=2)
    same_global = True
    if assoc == 16:  # the models' geometry: sets in each thread's local memory (default), in shared, in global
        sim_gpu.SHARED_SETS = True
        same_global = same(cpu, simulate(trace, perm, small, engine="gpu", geometry=CacheGeometry(assoc), occupancy=2))
        sim_gpu.SHARED_SETS = False
        sim_gpu.LOCAL_SETS = False
        same_global = same_global and same(cpu, simulate(trace, perm, small, engine="gpu",
                                                         geometry=CacheGeometry(assoc), occupancy=2))
        sim_gpu.LOCAL_SETS = True
    out.append({"case": f"{name} {target}", "same": same(cpu, dev) and same_global,
                "same_sampled": same(part_cpu, part),
                "evictions": sum(d.evictions for d in cpu.per_domain), "accesses": cpu.line_accesses,
                "fabric": cpu.fabric_bytes})
rng = np.random.default_rng(5)
for seed in range(3):
    tiles = [[[(int(rng.integers(0, 200)), int(rng.integers(1, 16)), bool(rng.random() < 0.25))
               for _ in range(int(rng.integers(1, 8)))] for _ in range(int(rng.integers(1, 7)))]
             for _ in range(int(rng.integers(10, 40)))]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = tiny_model(48, units=4, domains=1 + 2 * (seed % 2), partitions=2)
    want = simulate(trace, perm, model, engine=Engine("list", workers=1), geometry=CacheGeometry(4), occupancy=2)
    got = simulate(trace, perm, model, engine="gpu", geometry=CacheGeometry(4), occupancy=2)
    out.append({"case": f"random {seed}", "same": same(replace(want, dram_read_bytes=0, llc_hit_rate=None),
                                                      replace(got, dram_read_bytes=0, llc_hit_rate=None)),
                "same_sampled": True, "evictions": sum(d.evictions for d in want.per_domain),
                "accesses": want.line_accesses, "fabric": want.fabric_bytes})
print(json.dumps(out))
"""


@pytest.mark.slow  # over 15 s on CI's 2 cores: run with -m slow
def test_gpu_backend_equals_the_cpu_engines_under_the_cuda_simulator():
    rows = under_cuda_simulator(CHILD)
    assert len(rows) == 8
    for row in rows:
        assert row["same"] and row["same_sampled"], row
        assert row["evictions"] > 0 and row["accesses"] > 0, row  # the caches were under pressure
    assert any(row["fabric"] > 0 for row in rows)  # far lookups (two partitions) were exercised


# Every way of building and sorting the stream (sim.gpu.EXPAND, SORT) on traces with steps of no access and steps
# longer than a warp's lanes, exact and sampled, with and without the DRAM-bound sectors recorded (hit passes), and
# a domain with no access.
VARIANTS_CHILD = r"""
rng = np.random.default_rng(11)
out = []
for seed in range(2):
    lanes = 32
    tiles = [[[(int(rng.integers(0, 300)), int(rng.integers(1, 16)), bool(rng.random() < 0.25))
               for _ in range(int(rng.choice([0, 0, 1, 5, lanes - 1, lanes, lanes + 1, 2 * lanes + 3])))]
              for _ in range(int(rng.integers(1, 6)))] for _ in range(int(rng.integers(8, 20)))]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = tiny_model(64, units=4, domains=1 + seed, partitions=2)
    for fraction, speedup in ((1.0, 0.0), (0.5, 0.0), (1.0, 0.05)):
        cpu = simulate(trace, perm, model, SimParams(hit_speedup=speedup),
                       Engine("sets", workers=1, set_fraction=fraction), geometry=CacheGeometry(4), occupancy=2)
        for expand in ("lanes", "thread"):
            for sort in ("gather2", "gather3"):
                sim_gpu.EXPAND, sim_gpu.SORT = expand, sort
                got = simulate(trace, perm, model, SimParams(hit_speedup=speedup), Engine("gpu", set_fraction=fraction),
                               geometry=CacheGeometry(4), occupancy=2)
                out.append({"case": f"seed {seed} fraction {fraction} speedup {speedup} {expand} {sort}",
                            "same": same(cpu, got), "evictions": sum(d.evictions for d in cpu.per_domain)})
# A domain whose stream has no access at all (its programs' steps are all empty).
trace = make_trace([[[]] * 3, [[], [(5, 3, False)]], [[]]])
model = tiny_model(64, units=4, domains=2, partitions=2)
cpu = simulate(trace, np.array([2, 0, 1]), model, engine=Engine("sets", workers=1), geometry=CacheGeometry(4),
               occupancy=2)
for expand in ("lanes", "thread"):
    for sort in ("gather2", "gather3"):
        sim_gpu.EXPAND, sim_gpu.SORT = expand, sort
        got = simulate(trace, np.array([2, 0, 1]), model, engine="gpu", geometry=CacheGeometry(4), occupancy=2)
        out.append({"case": f"empty domain {expand} {sort}", "same": same(cpu, got), "evictions": 1,
                    "accesses": got.line_accesses})
print(json.dumps({"rows": out, "lanes": sim_gpu.device_kernels().EXPAND_LANES,
                  "empty_steps": int(np.sum(np.diff(trace.step_ptr) == 0))}))
"""


def test_gpu_stream_variants_equal_the_cpu_engine_with_empty_and_long_steps():
    got = under_cuda_simulator(VARIANTS_CHILD)
    assert got["lanes"] == 32 and got["empty_steps"] > 0  # the steps' lengths above are chosen around a warp
    assert len(got["rows"]) == 2 * 3 * 4 + 4
    assert all(row["accesses"] == 1 for row in got["rows"][-4:])
    for row in got["rows"]:
        assert row["same"] and row["evictions"] > 0, row


# The L2 request coalescer counted on the device (gpu_kernels.coalesce_sets) equals the CPU's count: exact and
# sampled sets, saturating and random-walk progress, and with a one-entry table, which runs out, so the CPU counts.
COALESCE_CHILD = r"""
from swizzlelab.sim import Engine, SimParams, gpu_kernels, simulate_many
task = load_task("matmul")
config = task.kernel.GPU_CONFIG
case = {"m": 512, "n": 512, "k": 128}
trace = task.access_model(case, config=config)
args, consts = task.swizzle_args(case, config)
small = replace(get_model("h100"), l2_bytes_per_domain=256 << 10, l2_effective_bytes_per_domain=256 << 10)
out = []
perms = [to_permutation(family(spec, **params), task.tile_grid(case, config), args, consts).perm
         for spec, params in (("grouped", {"GROUP_M": 2}), ("row_major", {}), ("column_major", {}))]
# The saturating progress model by name: the default's start jitter leaves these few programs nothing to coalesce.
for perm, runs in ((perms[0], ((1.0, "saturating"), (0.5, "saturating"), (1.0, "random_walk"))),
                   (perms[1], ((1.0, "saturating"),))):
    for fraction, progress in runs:
        cpu = simulate(trace, perm, small, SimParams(progress=progress),
                       Engine("sets", workers=2, set_fraction=fraction), occupancy=2)
        dev = simulate(trace, perm, small, SimParams(progress=progress), Engine("gpu", set_fraction=fraction),
                       occupancy=2)
        out.append({"case": f"{fraction} {progress}", "same": same(cpu, dev), "coalesced": cpu.coalesced_bytes,
                    "on_device": dict(sim_gpu.LAST_COALESCE)})
    gpu_kernels.COALESCE_SLOTS = 1
    dev = simulate(trace, perm, small, SimParams(progress="saturating"), "gpu", occupancy=2)
    gpu_kernels.COALESCE_SLOTS = 64
    cpu = simulate(trace, perm, small, SimParams(progress="saturating"), Engine("sets", workers=2), occupancy=2)
    out.append({"case": "one entry", "same": same(cpu, dev), "coalesced": cpu.coalesced_bytes,
                "on_device": dict(sim_gpu.LAST_COALESCE)})
many = simulate_many([(trace, p) for p in perms], small, occupancy=2, engine="gpu", concurrency=2)
alone = [simulate(trace, p, small, engine=Engine("sets", workers=1), occupancy=2) for p in perms]
print(json.dumps({"rows": out, "many_same": [same(a, b) for a, b in zip(many, alone)]}))
"""


@pytest.mark.slow  # over 15 s on CI's 2 cores: run with -m slow
def test_gpu_coalescer_count_equals_the_cpu_count_and_falls_back_when_its_table_runs_out():
    got = under_cuda_simulator(COALESCE_CHILD)
    rows = got["rows"]
    assert len(rows) == 6
    for row in rows:
        assert row["same"] and row["coalesced"] > 0, row
    for row in rows:
        want_counted = row["case"] != "one entry"
        assert row["on_device"] == {"asked": True, "counted": want_counted}, row
    assert got["many_same"] == [True, True, True]


@pytest.mark.gpu
def test_gpu_backend_equals_the_cpu_engine_on_a_gpu():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    task = load_task("matmul")
    case = {"m": 2048, "n": 2048, "k": 1024}
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=config)
    args, consts = task.swizzle_args(case, config)
    for spec, target in (("grouped", "h100"), ("identity", "mi300x")):
        perm = to_permutation(family(spec), task.tile_grid(case, config), args, consts).perm
        model = replace(get_model(target), l2_bytes_per_domain=2 << 20, l2_effective_bytes_per_domain=2 << 20)
        cpu = simulate(trace, perm, model, occupancy=2, engine="sets")
        dev = simulate(trace, perm, model, occupancy=2, engine="gpu")
        assert replace(cpu, elapsed_s=0.0) == replace(dev, elapsed_s=0.0)


def test_gpu_engine_without_a_gpu_is_a_one_line_error():
    if unavailable_reason() is None:
        pytest.skip("a GPU backend is available here")
    task = load_task("matmul")
    case = {"m": 256, "n": 256, "k": 256}
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=config)
    args, consts = task.swizzle_args(case, config)
    perm = to_permutation(family("identity"), task.tile_grid(case, config), args, consts).perm
    with pytest.raises(UserError, match="engine 'gpu' cannot run here: .*use engine='sets'") as info:
        simulate(trace, perm, "h100", engine="gpu")
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="engine must be one of auto, sets, list, gpu"):
        simulate(trace, perm, "h100", engine="cuda")


@pytest.mark.gpu
def test_device_memory_check_counts_the_blocks_cupys_pool_keeps():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    import cupy

    from swizzlelab.sim import gpu as sim_gpu

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    driver_free = cupy.cuda.runtime.memGetInfo()[0]
    block = cupy.empty(int(driver_free * 0.6), dtype=cupy.uint8)
    del block  # back to the pool, not to the driver
    try:
        kept = pool.free_bytes()
        assert kept >= driver_free * 0.6
        # A simulation needing more than the driver reports free, but less than that plus the pool's blocks, fits.
        need = cupy.cuda.runtime.memGetInfo()[0] + kept // 2
        sim_gpu.check_memory(cupy, need // sim_gpu.BYTES_PER_ACCESS, 0)
        with pytest.raises(UserError, match="needs about .* GB of device memory"):
            sim_gpu.check_memory(cupy, 2 * (driver_free + kept) // sim_gpu.BYTES_PER_ACCESS, 0)
    finally:
        pool.free_all_blocks()


def test_the_simulator_engine_choice_and_a_missing_gpu_in_one_line():
    with pytest.raises(UserError, match="simulator engine 'tpu' is unknown: use one of auto, cpu, gpu"):
        choose_engine("tpu")
    assert choose_engine("cpu") == ("auto", "simulator on the CPU (asked for)")
    reason = unavailable_reason()
    if reason is None:
        assert choose_engine("gpu")[0] == "gpu"
        return
    engine, note = choose_engine("auto")
    assert engine == "auto" and note == f"simulator on the CPU ({reason})"
    with pytest.raises(UserError, match="simulator engine gpu cannot run here: ") as info:
        choose_engine("gpu")
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_screening_on_the_gpu_predicts_what_the_cpu_does(tmp_path: Path, monkeypatch):
    """The optimize loop's predictions are the same on either engine: exact ones, screening estimates from a sample of
    the sets, and the GPU's exact screening (its default) against the CPU's exact prediction."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    from swizzlelab.optimize import Options, loop
    from swizzlelab.scenario import load_scenario
    from swizzlelab.swizzle.families import parse_order

    scenario = load_scenario("matmul", {"m": 4096, "n": 4096, "k": 2048}, target="h100", gpu_name="")
    monkeypatch.setattr(loop, "SCREEN_SAMPLE_ACCESSES", 0)  # this trace is screened as a large one is
    specs = ("grouped:GROUP_M=8", "column_major", "hilbert:SIDE=8")

    def predictions(engine: str, fractions: dict[str, float]) -> list[list]:
        monkeypatch.setattr(loop, "SCREEN_SET_FRACTION", fractions)
        state = loop.RunState(scenario, Options(out_dir=tmp_path / engine, sim_engine=engine))
        state.pick_engine()
        screen = loop.screen_text(state, sim_workers=1)
        rows = []
        for spec in specs:
            perm_id, estimate, wave, problem = screen(parse_order(spec, 2).normalized_source())
            assert not problem, problem
            exact = loop._predict(state, perm_id, scenario.permutation(spec).perm)[0]
            rows.append([replace(p, sim_s=0.0) for p in (estimate, exact)] + [wave])
        return rows

    sampled = {"auto": 0.25, "gpu": 0.25}
    cpu = predictions("cpu", sampled)
    assert predictions("gpu", sampled) == cpu
    assert all(row[0].set_fraction == 0.25 and row[1].set_fraction == 1.0 for row in cpu)
    assert loop.SCREEN_SET_FRACTION is sampled
    monkeypatch.undo()
    assert loop.SCREEN_SET_FRACTION["gpu"] == 1.0
    monkeypatch.setattr(loop, "SCREEN_SAMPLE_ACCESSES", 0)
    on_gpu = predictions("gpu", dict(loop.SCREEN_SET_FRACTION))
    assert [[row[1], row[1], row[2]] for row in cpu] == on_gpu
