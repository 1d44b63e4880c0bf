"""Speed of the L2 simulator (issue 15): line accesses per second on one CPU core, on all of this machine's cores,
on a GPU (engine 'gpu', where numba.cuda and CuPy find one), and the search's screening rate on matmul N^3.

    python benchmarks/sim_speed/run.py OUT_JSON [--size 8192] [--search-s 30] [--deadline-s 900]
        [--stages one_core,all_cores,gpu,search] [--targets h100,mi300x]
(stage gpu_batch, not run by default: --gpu-orders distinct orders through sim.simulate_many on the GPU, the
batch's accesses over its wall time; the stages gpu_orders and gpu_variants, whose runs are in the raw data, left
after commit 305b79c)
Trace: matmul N^3 fp16 (GPU_CONFIG), grouped-8 order, the task's H100 occupancy, exact simulation of the H100
and MI300X models. Timings are the simulator's own (`SimResult.elapsed_s`: schedule + cache model, the trace and
its footprint built beforehand, as a search uses it), after a first call that compiles and caches the set index.
The GPU's results are checked equal to the CPU engine's. Screening: the optimize loop's own screen function
(parse, prove, simulate on optimize's share of the L2 sets (SCREEN_SET_FRACTION), wave statistics) on every thread,
with the simulator on the CPU or (--search-engine gpu) the GPU, over the search's first sweep and its neighbours,
within --search-s; the overshoot is the time past the budget, against the longest single candidate. Each stage is
skipped once --deadline-s is near; the JSON is rewritten after every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.harness.sysinfo import cpu_name  # noqa: E402
from swizzlelab.hw import get_model  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.optimize.loop import SCREEN_SET_FRACTION, screen_text  # noqa: E402
from swizzlelab.optimize.search import SearchProposer, coarse_candidates, neighbours  # noqa: E402
from swizzlelab.optimize.state import Options, RunState  # noqa: E402
from swizzlelab.scenario import load_scenario  # noqa: E402
from swizzlelab.sim import (Engine, SimParams, clear_schedule_cache, default_workers, footprint_of,  # noqa: E402
                            simulate, simulate_many)
from swizzlelab.sim import gpu as sim_gpu  # noqa: E402
from swizzlelab.sim.gpu import unavailable_reason  # noqa: E402
from swizzlelab.sim.params import DEFAULT_PROGRESS  # noqa: E402



def gpu_name() -> str | None:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    except Exception:  # noqa: BLE001 - no GPU: the CPU figures stand alone
        return None


def timed_runs(trace, perm, model, occupancy, footprint, *, workers: int, engine: str, reps: int,
               params: SimParams) -> dict[str, Any]:
    results = [simulate(trace, perm, model, params=params, engine=Engine(engine, workers=workers), occupancy=occupancy,
                        footprint=footprint)
               for _ in range(reps)]
    best = min(results, key=lambda r: r.elapsed_s)
    return {
        "target": best.model, "engine": engine, "workers": workers, "reps": reps,
        "sim_s": [r.elapsed_s for r in results], "best_sim_s": best.elapsed_s, "line_accesses": best.line_accesses,
        "accesses_per_s": best.accesses_per_s, "accesses_per_s_median": sorted(
            r.accesses_per_s for r in results)[len(results) // 2],
        "l2_hit_pct": 100 * best.l2_hit_rate, "dram_read_bytes": best.dram_read_bytes,
        "dram_write_bytes": best.dram_write_bytes, "label": f"predicted (model {best.model}); times measured",
        "_result": best,
    }


def public(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if not k.startswith("_")}


def screening(scenario, budget_s: float, workers: int, engine: str, params: SimParams) -> dict[str, Any]:
    """The optimize loop's screening over the first sweep and its neighbours, timed per candidate, with the
    simulator where optimize's --sim-engine `engine` puts it."""
    options = Options(out_dir=Path(tempfile.mkdtemp(prefix="simspeed_")), screen_s=budget_s, workers=workers,
                      sim_engine=engine)
    state = RunState(scenario=scenario, options=options, sim_params=params)
    engine_note = state.pick_engine()
    fraction = SCREEN_SET_FRACTION[state.engine]
    screen = screen_text(state, sim_workers=1)
    durations: list[float] = []

    def timed(text: str):
        t0 = time.perf_counter()
        try:
            return screen(text)
        finally:
            durations.append(time.perf_counter() - t0)

    grid = scenario.grid
    cands = coarse_candidates(grid, scenario.model.n_domains)
    seen = {c.spec for c in cands}
    for cand in list(cands):
        for near in neighbours(cand, grid, scenario.model.n_domains):
            if near.spec not in seen:
                seen.add(near.spec)
                cands.append(near)
    notes: list[str] = []
    proposer = SearchProposer(grid=grid, n_domains=scenario.model.n_domains, screen=timed, screen_budget_s=budget_s,
                              workers=workers, notes=notes.append)
    state.footprint()  # computed once per run, before screening starts (as the loop does for the baseline)
    t0 = time.perf_counter()
    n = proposer.screen_all(cands)
    elapsed = time.perf_counter() - t0
    ranked = sorted((v for v in proposer.screened.values() if v.prediction), key=lambda v: v.prediction.score())
    return {
        "budget_s": budget_s, "elapsed_s": elapsed, "candidates_offered": len(cands), "candidates": n,
        "candidates_per_min": 60 * n / elapsed if elapsed > 0 else None, "overshoot_s": elapsed - budget_s,
        "sim_engine": engine, "engine": state.engine, "engine_note": engine_note, "set_fraction": fraction,
        "longest_candidate_s": max(durations, default=0.0), "median_candidate_s": sorted(durations)[len(durations) // 2]
        if durations else None, "workers": workers, "notes": notes,
        "top_predicted": [{"order": v.candidate.spec, "l2_hit_pct": 100 * v.prediction.l2_hit_rate,
                           "dram_read_bytes": v.prediction.dram_read_bytes,
                           "set_fraction": v.prediction.set_fraction} for v in ranked[:5]],
        "label": f"screening estimates predicted (model H100-SXM, {fraction:g} of the L2 sets); times measured",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--search-s", type=float, default=30.0)
    parser.add_argument("--deadline-s", type=float, default=900.0)
    parser.add_argument("--one-core-reps", type=int, default=2)
    parser.add_argument("--stages", default="one_core,all_cores,gpu,search", help="comma-separated, run in order")
    parser.add_argument("--gpu-orders", type=int, default=12, help="distinct orders in the gpu_batch stage")
    parser.add_argument("--batch-widths", default="0", help="orders at once in the gpu_batch stage (0: the default)")
    parser.add_argument("--targets", default="h100,mi300x", help="models simulated on all cores and on the GPU")
    parser.add_argument("--search-engine", choices=["auto", "cpu", "gpu"], default="cpu",
                        help="where the search stage simulates (optimize's --sim-engine; default cpu, the CPU's rate)")
    parser.add_argument("--gpu-screen-fraction", type=float, default=None,
                        help="share of the L2 sets the search screens on with the GPU engine (default: optimize's)")
    parser.add_argument("--progress", choices=["saturating", "contention"], default=None,
                        help="the NVIDIA models' default progress model for this run (simulate's DEFAULT_PROGRESS "
                             "when left out): one host's cost of each, side by side")
    args = parser.parse_args(argv)
    if args.gpu_screen_fraction is not None:
        SCREEN_SET_FRACTION["gpu"] = args.gpu_screen_fraction
    params = SimParams(progress=args.progress)  # every stage's simulations and the search's screening
    deadline = time.time() + args.deadline_s
    cores = default_workers()
    record: dict[str, Any] = {
        "script": "benchmarks/sim_speed/run.py",
        "command": " ".join(["python", "benchmarks/sim_speed/run.py", *argv]),
        "device": f"{gpu_name() or 'no GPU'}; {cpu_name()}, {cores} cores",
        "cpu": cpu_name(), "cores": cores, "gpu": gpu_name(), "python": sys.version.split()[0],
        "packages": sim_gpu.versions(), "progress": args.progress or DEFAULT_PROGRESS,
        "load_avg_before": os.getloadavg(),
        "note": "times measured on this machine; hit rates and bytes are predictions of the simulator",
        "targets": {"one_core_accesses_per_s": 30e6, "gpu_host_cpu_accesses_per_s": 100e6,
                    "gpu_accesses_per_s": 1e9, "search_candidates_per_min": 200},
        "stages": {}, "failures": [],
    }

    def save() -> None:
        record["load_avg_after"] = os.getloadavg()
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str))

    size = args.size
    scenario = load_scenario("matmul", sizes=[f"m={size}", f"n={size}", f"k={size}"], target="h100", gpu_name="")
    t0 = time.perf_counter()
    trace = scenario.trace
    record["trace"] = {"task": "matmul", "size": size, "line_accesses": int(trace.lines.size),
                       "build_s": time.perf_counter() - t0, "order": "grouped:GROUP_M=8",
                       "occupancy": scenario.occupancy.programs}
    footprint = footprint_of(trace)
    occupancy = scenario.occupancy.programs
    perm = scenario.permutation("grouped:GROUP_M=8").perm
    h100 = get_model("h100")
    models = [get_model(name) for name in args.targets.split(",")]
    # Compile the kernels and build the cached set index (a search pays this once per trace).
    for model in models:
        simulate(trace, perm, model, params=params, engine=Engine(workers=cores), occupancy=occupancy,
                 footprint=footprint)
    save()
    print(f"trace {record['trace']}", flush=True)

    def stage(name: str, need_s: float, fn) -> None:
        if time.time() + need_s > deadline:
            record["failures"].append(f"{name}: skipped, deadline near")
            return
        try:
            record["stages"][name] = fn()
        except Exception as err:  # noqa: BLE001 - a failed stage is recorded; the others still run
            record["failures"].append(f"{name}: {type(err).__name__}: {err}")
            record.setdefault("tracebacks", {})[name] = traceback.format_exc()[-4000:]
            print(traceback.format_exc(), flush=True)
        print(f"{name}: {json.dumps(record['stages'].get(name), default=str)[:600]}", flush=True)
        save()

    cpu_results: dict[str, Any] = {}

    def one_core():
        run = timed_runs(trace, perm, h100, occupancy, footprint, workers=1, engine="sets", reps=args.one_core_reps,
                         params=params)
        cpu_results[h100.name] = run["_result"]
        return [public(run)]

    def all_cores():
        runs = []
        for model in models:
            reps = 3 if model.llc_bytes == 0 else 1
            run = timed_runs(trace, perm, model, occupancy, footprint, workers=cores, engine="sets", reps=reps,
                             params=params)
            cpu_results[model.name] = run["_result"]
            runs.append(public(run))
        return runs

    def on_gpu():
        reason = unavailable_reason()
        if reason:
            return {"skipped": reason}
        runs = []
        default_place = (sim_gpu.LOCAL_SETS, sim_gpu.SHARED_SETS)
        places = [default_place] + [p for p in ((True, False), (True, True), (False, False)) if p != default_place]
        for model in models:
            reps = 3 if model.llc_bytes == 0 else 1
            cpu = cpu_results.get(model.name)
            # Every place for a thread's sets (sim.gpu.LOCAL_SETS, SHARED_SETS): each compiled by its first call.
            for local, shared in places:
                sim_gpu.LOCAL_SETS, sim_gpu.SHARED_SETS = local, shared
                t1 = time.perf_counter()
                first = simulate(trace, perm, model, params=params, occupancy=occupancy, footprint=footprint,
                                 engine="gpu")
                first_s = time.perf_counter() - t1
                run = timed_runs(trace, perm, model, occupancy, footprint, workers=cores, engine="gpu", reps=reps,
                                 params=params)
                phases = dict(sim_gpu.LAST_PHASES)
                row = {**public(run), "local_sets": local, "shared_sets": shared, "first_call_s": first_s,
                       "first_call_note": "numba.cuda compile + trace upload",
                       "equal_to_cpu_engine": None if cpu is None else replace(cpu, elapsed_s=0.0) == replace(
                           run["_result"], elapsed_s=0.0),
                       "first_equal": replace(first, elapsed_s=0.0) == replace(run["_result"], elapsed_s=0.0),
                       "phases_s_last_run": phases,
                       "phases_note": "device phases of the last run; the rest of sim_s is the CPU's schedule"}
                if (local, shared) == default_place:
                    # A screening estimate's size (a quarter of the sets), as a search would ask the device.
                    t1 = time.perf_counter()
                    sampled = simulate(trace, perm, model, params=params, engine=Engine("gpu", set_fraction=0.25),
                                       occupancy=occupancy, footprint=footprint)
                    row["quarter_sets_s"] = time.perf_counter() - t1
                    sampled_cpu = simulate(trace, perm, model, params=params,
                                           engine=Engine("sets", workers=cores, set_fraction=0.25),
                                           occupancy=occupancy, footprint=footprint)
                    row["quarter_sets_equal_to_cpu_engine"] = replace(sampled, elapsed_s=0.0) == replace(
                        sampled_cpu, elapsed_s=0.0)
                runs.append(row)
                print(f"gpu local_sets={local} shared_sets={shared}: {run['sim_s']} phases {phases}", flush=True)
        sim_gpu.LOCAL_SETS, sim_gpu.SHARED_SETS = default_place
        return runs

    def gpu_batch():
        """A search's batch on the device: --gpu-orders distinct orders of the first sweep through
        sim.simulate_many, at each of --batch-widths orders at once (each order's serial CPU work, the saturating
        model's schedule, overlaps the others' and the device's walks; one order on the device at a time). The
        trace is known to the simulator by then (the first order does not run alone). The rate is all orders'
        accesses over the batch's wall time, from the call to the last result. Two orders of each batch are
        checked equal to the CPU engine."""
        reason = unavailable_reason()
        if reason:
            return {"skipped": reason}
        specs = [c.spec for c in coarse_candidates(scenario.grid, scenario.model.n_domains)][:args.gpu_orders]
        jobs = [(trace, scenario.permutation(spec).perm) for spec in specs]
        cpu = {}
        for i in (1, len(jobs) - 1):
            cpu[i] = simulate(*jobs[i], h100, params=params, engine=Engine("sets", workers=cores), occupancy=occupancy,
                              footprint=footprint)
        runs = []
        n = int(trace.lines.size)
        for width in [int(w) for w in args.batch_widths.split(",")]:
            t0 = time.perf_counter()
            results = simulate_many(jobs, h100, params=params, occupancy=occupancy, footprint=footprint, engine="gpu",
                                    concurrency=width or None)
            wall = time.perf_counter() - t0
            runs.append({
                "target": h100.name, "engine": "gpu", "progress": results[0].progress, "orders": len(jobs),
                "concurrency": width or cores, "default_concurrency": width == 0,
                "line_accesses_per_order": n, "batch_wall_s": wall, "accesses_per_s": n * len(jobs) / wall,
                "order_latency_s_median": statistics.median(r.elapsed_s for r in results),
                "coalescer_on_device": dict(sim_gpu.LAST_COALESCE),
                "equal_to_cpu_engine": {specs[i]: replace(c, elapsed_s=0.0) == replace(results[i], elapsed_s=0.0)
                                        for i, c in cpu.items()},
                "rows": [{"order": spec, "sim_s": r.elapsed_s, "l2_hit_pct": 100 * r.l2_hit_rate,
                          "dram_read_bytes": r.dram_read_bytes} for spec, r in zip(specs, results)],
                "label": f"predicted (model {h100.name}); times measured",
                "note": "simulate_many: the batch's accesses over its wall time"})
            print(f"gpu batch width {width or cores}: {len(jobs)} orders in {wall:.3f} s "
                  f"({n * len(jobs) / wall / 1e9:.2f} G accesses/s)", flush=True)
        return runs

    stages = {"one_core": (40, one_core), "all_cores": (20, all_cores), "gpu": (25, on_gpu),
              "gpu_batch": (40, gpu_batch),
              "search": (args.search_s + 10, lambda: screening(scenario, args.search_s, cores, args.search_engine,
                                                               params))}
    for name in args.stages.split(","):
        stage(name, *stages[name])
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
