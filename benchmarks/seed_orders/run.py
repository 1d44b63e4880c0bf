"""The original MI300X swizzle work's 29 formulas, pasted as written, on swizzlelab's kernels shaped like its kernels:
each one's predicted L2 hit rate, DRAM bytes and speedup (model MI300X) beside what the original measured.

Predictions are the simulator's and the time model's for model MI300X, on this machine's CPU; measurements are the
original's, on an AMD MI300X (its iteration logs, cited below). Writes a small JSON and prints a table.
Usage: nice -n 10 python -m benchmarks.seed_orders.run [--out benchmarks/seed_orders/seed_orders_cpu.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.harness.sysinfo import cpu_name
from swizzlelab.io import atomic_write_text
from swizzlelab.scenario import Scenario, load_scenario
from swizzlelab.sim import simulate_many
from swizzlelab.sim.timemodel import TimeModel, Traffic, calibration_for
from swizzlelab.trace import AccessTrace

ROOT = Path(__file__).resolve().parents[2]
# The original work's formulas, where their owner keeps them: beside the checkout, never copied into it.
SEEDS = ROOT.parent / "shared" / "seed_formulas"
OUT = ROOT / "benchmarks" / "seed_orders" / "seed_orders_cpu.json"
TARGET = "mi300x"
REPOSITORY = "AMDResearch/intelliperf"
# Hit rates within 5 points count as no change (the original's re-measurements of one order moved at most 0.9); speedups
# within the original's own spread for one order (noise_band), and never within 2%, count as no change.
HIT_STEP_PP = 5.0
MIN_NOISE = 0.02


@dataclass(frozen=True)
class Original:
    """What the original measured for one kernel on an MI300X: its log (path and commit in REPOSITORY), the kernel
    and sizes its runner used then, its own order's L2 hit rate (%) and time, and per iteration (hit rate %, % faster:
    negative when the log says slower)."""

    log: str
    commit: str
    shape: str
    own_hit_pct: float
    own_ms: float
    rows: dict[int, tuple[float, float]]

    def speedup(self, iteration: int) -> float:
        faster = self.rows[iteration][1] / 100
        return 1 + faster if faster >= 0 else 1 / (1 - faster)


ORIGINALS = {
    "transpose": Original(
        "examples/triton/autogen_10/swizzling_aware/transpose.txt", "b477d4185e3f85adb525c2998904f8be4a36f4b1",
        "transpose.py / transpose_runner.py: 2-D grid (cdiv(M,32), cdiv(N,32)), 32x32 tiles, x 32768x32768 fp16",
        3.5, 1.88, {1: (24.2, 12.4), 2: (23.4, 7.4), 3: (24.2, 11.6), 4: (4.1, 2.8), 5: (3.3, 0.3), 6: (24.3, 12.4),
                    7: (4.1, 1.1), 8: (23.5, 6.4), 9: (23.5, 6.5)}),
    "matmul": Original(
        "examples/triton/autogen_10/swizzling_logs_2/gemm_log.txt", "5cd989c327368af9289215457e1d70a32944db07",
        "gemm.py: the tutorial's grouped matmul (GROUP_SIZE_M 8), 128x256x64 tiles, 8192^3 fp16",
        37.9, 3.74, {1: (75.3, 8.6), 2: (37.5, 2.8)}),
    "spmv": Original(
        "examples/triton/autogen_10/swizzling_aware/spmv.txt", "b477d4185e3f85adb525c2998904f8be4a36f4b1",
        "spmv.py / spmv_runner.py: one program a row, BLOCK_SIZE 128, 4096x4096 CSR of density 0.08, fp16",
        29.1, 0.01, {1: (37.3, 1.1), 2: (29.3, -2.7), 3: (29.1, -0.8), 4: (35.8, -2.6), 5: (29.0, 0.3),
                     6: (29.3, -3.7), 7: (35.8, -3.0), 8: (35.8, -3.3)}),
    "lean_attention": Original(
        "examples/triton/attention/lean_attn.txt", "264292d4fd999fdfed30cba006e9ddb463097684",
        "lean_attn.py / test_lean_attn.py: 912 programs, batch 1, 64 heads (MHA), 65536 keys, d 64, 16 queries, fp16",
        0.3, 0.35, {1: (0.4, 0.5), 2: (0.5, 3.8), 3: (0.4, 2.7), 4: (0.4, 1.4), 5: (0.4, 0.8), 6: (0.4, -5.1),
                    7: (0.4, -1.3), 8: (0.4, -0.3), 9: (0.4, -2.4), 10: (0.4, -4.8)}),
}


@dataclass(frozen=True)
class Case:
    """One case a task's formulas are simulated at: the task case, what it stands for, and configuration fields
    set as the original's kernel had them."""

    task: str
    label: str
    case: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)  # sizes for --quick
    originals_size: bool = True  # the original's own time anchors the time model only at the original's sizes
    # A tensor small enough to stay in each CU's L1 (MI300X: 32 KB a CU), which the L2 model has no level for: also
    # simulated without its accesses (the L2 then sees what the L1 passes on, less first touches).
    in_l1: str | None = None


CASES = (
    Case("transpose", "32768^2 fp16, 32x32 tiles (the original's runner)",
         {"seed": 13, "m": 32768, "n": 32768, "dtype": "float16", "tile_m": 32, "tile_n": 32},
         quick={"m": 2048, "n": 2048}),
    Case("transpose", "4096^2 fp16, 32x32 tiles (the built-in case bench:2)",
         {"seed": 13, "m": 4096, "n": 4096, "dtype": "float16", "tile_m": 32, "tile_n": 32},
         quick={"m": 1024, "n": 1024}, originals_size=False),
    Case("matmul", "8192^3 fp16, 128x256x64 tiles (the original's)", {"seed": 12, "m": 8192, "n": 8192, "k": 8192},
         config={"block_n": 256}, quick={"m": 2048, "n": 2048, "k": 512}),
    Case("spmv", "4096 x 4096, 328 nonzeros a row (density 0.08), uniform columns, BLOCK 128 (the original's)",
         {"seed": 11, "rows": 4096, "cols": 4096, "avg_nnz": 328, "communities": 1}, config={"block": 128},
         quick={"rows": 1024, "cols": 1024, "avg_nnz": 82}, in_l1="x_ptr"),
    Case("lean_attention", "1 x 64 heads (MHA), 65536 keys, d 64, 912 programs (the original's)",
         {"seed": 0, "batch": 1, "heads": 64, "kv_heads": 64, "head_dim": 64, "min_ctx": 65536, "max_ctx": 65536,
          "n_programs": 912}, quick={"heads": 8, "kv_heads": 8, "min_ctx": 4096, "max_ctx": 4096}),
)


def scenario_of(case: Case, quick: bool) -> Scenario:
    """The task case on the MI300X model, with the original's configuration fields where they differ."""
    sizes = {**case.case, **(case.quick if quick else {})}
    scenario = load_scenario(case.task, sizes, target=TARGET, gpu_name="")
    if not case.config:
        return scenario
    config = replace(scenario.config, **case.config)
    module = scenario.kernel_module
    grid = tuple(int(g) for g in module.tile_grid(**scenario.sizes, config=config))
    args, consts = module.swizzle_args(**scenario.sizes, config=config)
    return replace(scenario, config=config, grid=grid, args=dict(args), consts=dict(consts), _trace=None)


def without_tensor(trace: AccessTrace, name: str) -> AccessTrace:
    """`trace` without the accesses to tensor `name` (steps left empty dropped): what the L2 sees when a cache before
    it serves that tensor."""
    info = trace.tensor(name)
    keep = (trace.lines < info.base_line) | (trace.lines >= info.base_line + info.n_lines)
    step_of = np.repeat(np.arange(trace.n_steps), np.diff(trace.step_ptr))
    counts = np.bincount(step_of[keep], minlength=trace.n_steps)
    kept = counts > 0
    tile_of = np.repeat(np.arange(trace.n_tiles), np.diff(trace.tile_step_ptr))
    per_tile = np.bincount(tile_of[kept], minlength=trace.n_tiles)
    return replace(trace, lines=trace.lines[keep], sector_mask=trace.sector_mask[keep], is_write=trace.is_write[keep],
                   step_ptr=np.concatenate([[0], np.cumsum(counts[kept])]),
                   tile_step_ptr=np.concatenate([[0], np.cumsum(per_tile)]),
                   meta={**trace.meta, "without": f"{name} (served before the L2)"})


def partner_distances(perm: np.ndarray, grid: tuple[int, int], domains: int) -> dict[str, dict[str, float | None]]:
    """A transpose of half-line tiles (32 x 32 fp16): tile (m, n) shares its read lines with (m, n ^ 1) and its write
    lines with (m ^ 1, n). For each side: the share of tiles whose partner runs on the same XCD (launch index mod
    `domains`), and how many of that XCD's programs apart (median), which decides whether the line is still in L2."""
    position = np.empty_like(perm)
    position[perm] = np.arange(perm.size)
    m, n = np.divmod(np.arange(perm.size), grid[1])
    out = {}
    for side, pm, pn in (("read", m, n ^ 1), ("write", m ^ 1, n)):
        ok = (pm < grid[0]) & (pn < grid[1])
        a, b = position[ok], position[(pm * grid[1] + pn)[ok]]
        same = a % domains == b % domains
        gap = np.abs(a - b)[same] // domains
        out[side] = {"same_xcd": round(float(same.mean()), 4),
                     "median_programs_apart": float(np.median(gap)) if gap.size else None}
    return out


def formula_rows(scenario: Scenario, task: str) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Each formula file of the task parsed for the scenario's kernel as written and checked on its grid; the
    distinct permutations of the bijective ones (the kernel's own order first), by permutation id."""
    own = scenario.check(scenario.default_order())
    perms = {own.permutation_id: own.perm}
    rows = []
    for path in sorted((SEEDS / task).glob("*.txt")):
        row: dict[str, Any] = {"iteration": int(path.stem.split("_")[-1])}
        try:
            checked = scenario.check(scenario.parse_order(str(path)))
        except UserError as err:
            rows.append({**row, "accepted": False, "error": str(err)})
            continue
        row.update(accepted=True, bijection=checked.proof.is_bijection, permutation_id=checked.permutation_id,
                   own_order=checked.permutation_id == own.permutation_id)
        if checked.proof.is_bijection:
            perms.setdefault(checked.permutation_id, checked.perm)
        else:
            row["proof"] = checked.proof.message()
        rows.append(row)
    return rows, perms


def predicted(scenario: Scenario, perms: dict[str, np.ndarray], original: Original | None) -> dict[str, dict[str, Any]]:
    """Simulated figures and time-model speedups (model MI300X) of every distinct permutation, against the kernel's
    own order (the first): the memory-bound figure with its interval (no measurement of this kernel's own order on an
    MI300X), and, given the `original` at its sizes, the figure anchored on the time it measured for its own order."""
    items = list(perms.items())
    results = simulate_many([(scenario.trace_for(perm), perm) for _, perm in items], scenario.model,
                            occupancy=scenario.occupancy.programs, concurrency=1)
    hw = scenario.model
    base = Traffic.of(results[0])
    free = TimeModel(hw, calibration_for(hw), base)
    anchored = None if original is None else TimeModel(hw, calibration_for(hw), base, base_ms=original.own_ms)
    out = {}
    for (pid, perm), result in zip(items, results):
        time_free = free.predict(Traffic.of(result))
        time_anchored = None if anchored is None else anchored.predict(Traffic.of(result)).speedup
        out[pid] = {"hit_pct": round(100 * result.l2_hit_rate, 2), "dram_read_bytes": result.dram_read_bytes,
                    "dram_write_bytes": result.dram_write_bytes, "partial_write_bytes": result.partial_write_bytes,
                    "l2_miss_read_bytes": result.l2_miss_read_bytes, "speedup": round(time_free.speedup, 4),
                    "speedup_interval": [round(time_free.low, 4), round(time_free.high, 4)],
                    "speedup_anchored": None if time_anchored is None else round(time_anchored, 4)}
        if scenario.task.name == "transpose" and scenario.sizes.get("tile_m") == 32:
            out[pid]["partners"] = partner_distances(perm, scenario.grid, hw.n_domains)
    return out


def _kind(value: float, step: float) -> str:
    return "up" if value >= step else "down" if value <= -step else "same"


def noise_band(rows: list[dict[str, Any]], original: Original) -> float:
    """How far the original's measured speedups of one and the same order lie apart (formulas of equal permutation,
    the kernel's own order at 1.0 among them): below that, a measured change is the measurement's noise."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        if row.get("bijection"):
            key = "own" if row["own_order"] else row["permutation_id"]
            groups.setdefault(key, [1.0] if key == "own" else []).append(original.speedup(row["iteration"]))
    spreads = [max(g) / min(g) - 1 for g in groups.values() if len(g) > 1]
    return round(max([MIN_NOISE, *spreads]), 4)


def _speed_kind(speedup: float, noise: float) -> str:
    return "faster" if speedup > 1 + noise else "slower" if speedup < 1 / (1 + noise) else "same"


def agreement(rows: list[dict[str, Any]], original: Original, own: dict[str, Any],
              key: str = "predicted") -> dict[str, Any]:
    """Per formula with a prediction: does the predicted change of hit rate (against the kernel's own order) fall in
    the same class (up / same / down by HIT_STEP_PP) as the original's measured one, and the predicted speedup
    (memory-bound figure; anchored figure) in the same class (faster / same / slower beyond the original's noise
    band)? And the mean absolute error of the hit-rate changes."""
    noise = noise_band(rows, original)
    hits, speeds, anchored, errors, off = 0, 0, 0, [], []
    compared = [r for r in rows if key in r]
    for row in compared:
        measured_delta = row["measured"]["hit_pct"] - original.own_hit_pct
        predicted_delta = row[key]["hit_pct"] - own["hit_pct"]
        errors.append(abs(measured_delta - predicted_delta))
        measured_kind = _speed_kind(row["measured"]["speedup"], noise)
        hit_ok = _kind(measured_delta, HIT_STEP_PP) == _kind(predicted_delta, HIT_STEP_PP)
        speed_ok = measured_kind == _speed_kind(row[key]["speedup"], noise)
        if row[key]["speedup_anchored"] is not None:
            anchored += measured_kind == _speed_kind(row[key]["speedup_anchored"], noise)
        hits, speeds = hits + hit_ok, speeds + speed_ok
        if not (hit_ok and speed_ok):
            off.append(row["iteration"])
    return {"formulas": len(rows), "accepted": sum(r["accepted"] for r in rows),
            "bijections": sum(bool(r.get("bijection")) for r in rows), "compared": len(compared),
            "noise_band": noise, "hit_change_agrees": hits, "speed_class_agrees": speeds,
            "speed_class_agrees_anchored": anchored if compared and compared[0][key]["speedup_anchored"]
            is not None else None,
            "hit_change_mae_pp": round(float(np.mean(errors)), 2) if errors else None, "disagree_iterations": off}


def run_case(case: Case, quick: bool) -> dict[str, Any]:
    """One case: every formula parsed, proven, simulated (distinct orders once) and set beside the original."""
    started = time.monotonic()
    scenario = scenario_of(case, quick)
    original = ORIGINALS[case.task]
    rows, perms = formula_rows(scenario, case.task)
    at_size = original if case.originals_size and not quick else None
    variants = {"predicted": predicted(scenario, perms, at_size)}
    if case.in_l1:
        l1 = replace(scenario, _trace=without_tensor(scenario.trace, case.in_l1))
        variants[f"predicted_{case.in_l1}_in_l1"] = predicted(l1, perms, at_size)
    own_id = next(iter(perms))
    for row in rows:
        row["measured"] = {"hit_pct": original.rows[row["iteration"]][0],
                           "speedup": round(original.speedup(row["iteration"]), 4)}
        if row.get("bijection"):
            row.update({key: {k: v for k, v in figures[row["permutation_id"]].items() if k != "partners"}
                        for key, figures in variants.items()})
    figures = variants["predicted"]
    return {"task": case.task, "case": case.label, "sizes": scenario.sizes, "grid": list(scenario.grid),
            "config": repr(scenario.config), "occupancy": scenario.occupancy.text(),
            "own_order": {"measured_hit_pct": original.own_hit_pct, "measured_ms": original.own_ms,
                          **{key: figures[own_id] for key, figures in variants.items()}},
            "orders": {pid: figures[pid].get("partners") for pid in perms if "partners" in figures[pid]} or None,
            "rows": rows, **{key.replace("predicted", "agreement"): agreement(rows, original, figures[own_id], key)
                             for key, figures in variants.items()},
            "seconds": round(time.monotonic() - started)}


def table(case: dict[str, Any]) -> str:
    """The case as lines of text: each formula's predicted and measured hit rate and speedup."""
    lines = [f"{case['task']} {case['case']}: grid {case['grid']}, {case['agreement']}"]
    for row in case["rows"]:
        got = row.get("predicted")
        shown = (f"predicted {got['hit_pct']:5.1f}% {got['speedup']:.3f}x" if got else
                 f"not predicted: {row.get('proof') or row.get('error')}"[:60])
        lines.append(f"  iteration {row['iteration']:2d}: {shown}  measured {row['measured']['hit_pct']:5.1f}% "
                     f"{row['measured']['speedup']:.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not the study's result)")
    parser.add_argument("--only", default="", help="comma-separated tasks")
    args = parser.parse_args(argv)
    only = {t for t in args.only.split(",") if t}
    cases = []
    for case in CASES:
        if only and case.task not in only:
            continue
        cases.append(run_case(case, args.quick))
        print(table(cases[-1]), flush=True)
    report = {
        "command": "python -m benchmarks.seed_orders.run" + (" --quick" if args.quick else ""),
        "device": f"{cpu_name()} ({platform.machine()}), predictions only: no GPU",
        "kind": "predicted (model MI300X: simulator and time model); measured: the original work's AMD MI300X logs",
        "original": {"repository": REPOSITORY,
                     "logs": {t: {"path": o.log, "commit": o.commit, "kernel": o.shape} for t, o in ORIGINALS.items()}},
        "rules": {"hit_step_pp": HIT_STEP_PP, "min_noise": MIN_NOISE},
        "cases": cases,
    }
    atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
