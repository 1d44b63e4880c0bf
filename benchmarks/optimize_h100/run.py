"""GPU run of `swizzlelab optimize` on an H100: per task, the best order found vs the kernel's default order vs
Triton's grouped order (GROUP_M=8), each with time +- 95% CI, ncu L2 hit rate and DRAM read bytes.

Run on the H100:  python benchmarks/optimize_h100/run.py OUTDIR          (about 7-9 minutes)
CPU smoke test:   python benchmarks/optimize_h100/run.py OUTDIR --smoke  (tiny sizes, predictions only)
Writes OUTDIR/optimize_h100.json (copy it to benchmarks/optimize_h100/optimize_h100.json) and OUTDIR/<task>/ (the optimize
outputs: log.txt, iterations.jsonl, report.json/html, best_kernel.py.txt), and prints a table.
The generated kernel is kept as best_kernel.py.txt: a copy of a task's kernel.py, not a module of the repository.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.harness.sysinfo import system_info
from swizzlelab.io import atomic_write_text
from swizzlelab.optimize import Options, run
from swizzlelab.optimize.assess import predict
from swizzlelab.optimize.measure import MeasureCache, cache_key
from swizzlelab.scenario import load_scenario
from swizzlelab.sim import footprint_of
from swizzlelab.swizzle import family

# Per task: the case (None = first benchmark case), GPU iterations after the baseline, and simulator seconds.
# spmv runs a quarter of the benchmark's rows with its full x (128 MB, over the 50 MB L2): simulating one order
# of the 4M-row trace takes tens of seconds, of the 1M-row trace about ten.
PLAN: dict[str, dict[str, Any]] = {
    "matmul": {"case": {"seed": 12, "m": 8192, "n": 8192, "k": 8192}, "budget": 2, "screen_s": 35},
    "transpose": {"case": None, "budget": 3, "screen_s": 20},
    "spmv": {"case": {"seed": 11, "rows": 1048576, "cols": 33554432, "avg_nnz": 32, "communities": 64},
             "budget": 2, "screen_s": 30},
    "lean_attention": {"case": None, "budget": 2, "screen_s": 30},
}
SMOKE: dict[str, dict[str, Any]] = {
    "matmul": {"case": {"seed": 1, "m": 1024, "n": 1024, "k": 256}, "budget": 2, "screen_s": 10},
    "transpose": {"case": {"seed": 1, "m": 1024, "n": 1024, "dtype": "float16"}, "budget": 2, "screen_s": 10},
    "spmv": {"case": {"seed": 1, "rows": 4096, "cols": 32768, "avg_nnz": 8, "communities": 8}, "budget": 2,
             "screen_s": 10},
    "lean_attention": {"case": {"seed": 0, "batch": 2, "heads": 8, "kv_heads": 2, "head_dim": 64, "min_ctx": 64,
                                "max_ctx": 256, "n_programs": 16}, "budget": 2, "screen_s": 10},
}


def _ci_ms(mean_ms: float, sem_ms: float) -> list[float]:
    half = 1.96 * sem_ms if math.isfinite(sem_ms) else float("nan")
    return [mean_ms - half, mean_ms + half]


def row_from_baseline(attempt: Any) -> dict[str, Any]:
    m = attempt.measurement.to_dict() if attempt.measurement else {}
    timing = m.get("timing") or {}
    ncu = m.get("ncu") or {}
    pred = attempt.prediction.to_dict() if attempt.prediction else {}
    return {
        "order": "default (kernel's own site)",
        "permutation_id": attempt.permutation_id,
        "time_ms": timing.get("mean_ms"),
        "time_ci95_ms": _ci_ms(timing["mean_ms"], timing["sem_ms"]) if timing else None,
        "speedup_vs_default": 1.0 if timing else None,
        "speedup_ci95": None,
        "l2_hit_rate_pct": ncu.get("l2_hit_rate_pct"),
        "dram_read_bytes": ncu.get("dram_read_bytes"),
        "ncu_error": ncu.get("error"),
        "predicted_l2_hit_rate_pct": 100 * pred["l2_hit_rate"] if pred else None,
        "predicted_dram_read_bytes": pred.get("dram_read_bytes"),
        "measured": f"measured ({m['device']})" if m else "not measured",
        "predicted": pred.get("kind"),
    }


def row_from_measurement(label: str, permutation_id: str, measurement: Any, prediction: Any) -> dict[str, Any]:
    m = measurement.to_dict() if measurement else {}
    comparison = m.get("comparison") or {}
    ncu = m.get("ncu") or {}
    pred = prediction.to_dict() if prediction else {}
    return {
        "order": label,
        "permutation_id": permutation_id,
        "time_ms": comparison.get("candidate_ms"),
        "time_ci95_ms": _ci_ms(comparison["candidate_ms"], comparison["candidate_sem_ms"]) if comparison else None,
        "default_time_ms_interleaved": comparison.get("baseline_ms"),
        "speedup_vs_default": comparison.get("speedup"),
        "speedup_ci95": comparison.get("ci95"),
        "l2_hit_rate_pct": ncu.get("l2_hit_rate_pct"),
        "dram_read_bytes": ncu.get("dram_read_bytes"),
        "ncu_error": ncu.get("error"),
        "correctness": {"passed": m.get("passed"), "message": m.get("check_message")} if m else None,
        "error": m.get("error"),
        "predicted_l2_hit_rate_pct": 100 * pred["l2_hit_rate"] if pred else None,
        "predicted_dram_read_bytes": pred.get("dram_read_bytes"),
        "measured": f"measured ({m['device']})" if m else "not measured",
        "predicted": pred.get("kind"),
    }


def grouped8_row(problem: Any, result: Any, cache_path: Path, measurer: Any) -> dict[str, Any] | None:
    """Triton's grouped order: from the run when it was an iteration, else measured now (through the cache)."""
    if problem.rank != 2:
        return None
    formula = problem.formula(family("grouped", GROUP_M=8).normalized_source())
    checked = problem.check(formula)
    for attempt in result.state.attempts:
        if attempt.permutation_id == checked.permutation_id and attempt.prediction:
            return row_from_measurement("grouped:GROUP_M=8", checked.permutation_id, attempt.measurement,
                                        attempt.prediction)
    prediction = predict(problem, checked.perm, footprint_of(problem.trace))
    measurement = None
    if measurer is not None:
        cache = MeasureCache.open(cache_path)
        key = cache_key(problem.kernel.source_hash, checked.permutation_id, problem.target.model.name, problem.sizes)
        measurement = cache.get(key)
        if measurement is None:
            measurement = measurer.measure(formula)
            cache.put(key, measurement)
    return row_from_measurement("grouped:GROUP_M=8", checked.permutation_id, measurement, prediction)


def run_task(name: str, plan: dict[str, Any], out_dir: Path, measure_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    problem = load_scenario(name, plan["case"], target="h100")
    task_out = out_dir / name
    options = Options(out_dir=task_out, budget=plan["budget"], screen_s=plan["screen_s"], measure_s=measure_s,
                      command=" ".join(sys.argv))
    result = run(problem, options, on_note=lambda text: print(f"  [{name}] {text}", flush=True),
                 on_iteration=lambda a: print(f"  [{name}] {a.name()}: {a.status}: {a.message}", flush=True))
    state = result.state
    generated = task_out / "best_kernel.py"
    if generated.exists():
        generated.replace(task_out / "best_kernel.py.txt")
    measurer = None
    if problem.target.can_measure:
        from swizzlelab.optimize.measure import GpuMeasurer

        measurer = GpuMeasurer(problem, budget_s=measure_s, ncu_dir=task_out / "ncu")
    baseline = state.baseline
    best = state.best()
    rows = {"default": row_from_baseline(baseline)}
    rows["grouped8"] = grouped8_row(problem, result, task_out / "measure-cache.json", measurer)
    grouped8_note = None if rows["grouped8"] else (
        f"no grouped order: Triton's GROUP_M=8 order needs a 2-D tile grid and {name}'s grid is 1-D")
    rows["best"] = (
        rows["default"] if best.iteration == 0
        else row_from_measurement(best.label, best.permutation_id, best.measurement, best.prediction)
    )
    return {
        "case": problem.case,
        "grid": list(problem.grid),
        "target_model": problem.target.model.name,
        "best_iteration": best.iteration,
        "best_label": best.label,
        "best_formula": best.formula,
        "best_is_default": best.iteration == 0,
        "iterations": len(state.attempts) - 1,
        "statuses": [a.status for a in state.attempts],
        "rows": rows,
        "grouped8_note": grouped8_note,
        "command": "python " + " ".join(["benchmarks/optimize_h100/run.py"] + sys.argv[1:]),
        "notes": state.notes,
        "outputs": str(task_out),
        "wall_s": time.perf_counter() - started,
    }


def merge_reports(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """One report from two runs on the same device: the later run's tasks replace the earlier's, each task keeps
    the command that measured it, and the matmul summary keys follow the matmul task."""
    if earlier.get("device") != later.get("device"):
        raise SystemExit(f"cannot merge runs on {earlier.get('device')!r} and {later.get('device')!r}")
    tasks = {**earlier["tasks"], **later["tasks"]}
    for name, task in tasks.items():
        task.setdefault("command", (later if name in later["tasks"] else earlier)["command"])
    merged = {**earlier, **later, "tasks": tasks}
    merged["command"] = " ; ".join(dict.fromkeys(t["command"] for t in tasks.values()))
    for key in ("row_major_dram_read_bytes", "grouped8_dram_read_bytes", "best_dram_read_bytes"):
        source = later if "matmul" in later["tasks"] else earlier
        if key in source:
            merged[key] = source[key]
    return merged


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--tasks", default=",".join(PLAN))
    parser.add_argument("--measure-s", type=float, default=2.0, help="GPU seconds per interleaved timing")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU test of the script)")
    parser.add_argument("--merge", default=None, help="an earlier optimize_h100.json whose other tasks to keep")
    args = parser.parse_args(argv)
    out_dir = Path(args.outdir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plans = SMOKE if args.smoke else PLAN
    info = system_info()
    results: dict[str, Any] = {}
    for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        print(f"== {name}", flush=True)
        results[name] = run_task(name, plans[name], out_dir, args.measure_s)
    report: dict[str, Any] = {
        "script": "benchmarks/optimize_h100/run.py",
        "command": "python " + " ".join(["benchmarks/optimize_h100/run.py"] + (argv if argv is not None else sys.argv[1:])),
        "device": info.gpu if info.is_gpu else f"none (CPU: {info.cpu}; predictions only)",
        "system": info.to_dict(),
        "labels": {
            "time_ms": f"measured ({info.gpu})" if info.is_gpu else "not measured",
            "l2_hit_rate_pct / dram_read_bytes": "measured by ncu" if info.is_gpu else "not measured",
            "predicted_*": "predicted (model H100-SXM)",
        },
        "tasks": results,
    }
    if "matmul" in results:
        rows = results["matmul"]["rows"]
        report["row_major_dram_read_bytes"] = rows["default"]["dram_read_bytes"]
        report["grouped8_dram_read_bytes"] = (rows["grouped8"] or {}).get("dram_read_bytes")
        report["best_dram_read_bytes"] = rows["best"]["dram_read_bytes"]
    if args.merge:
        report = merge_reports(json.loads(Path(args.merge).read_text()), report)
    atomic_write_text(out_dir / "optimize_h100.json", json.dumps(report, indent=1, default=str))
    print(f"\n{'task':<15}{'order':<34}{'time ms':>10}{'speedup [95% CI]':>26}{'L2 hit %':>10}{'DRAM read MB':>14}"
          f"{'pred hit %':>11}")
    for name, res in results.items():
        for key in ("default", "grouped8", "best"):
            row = res["rows"].get(key)
            if row is None:
                continue
            ci = row.get("speedup_ci95")
            speed = "-" if row.get("speedup_vs_default") is None else (
                f"{row['speedup_vs_default']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
            dram = row.get("dram_read_bytes")
            print(f"{name:<15}{(key + ': ' + row['order'])[:33]:<34}{_fmt(row.get('time_ms'), '.4f'):>10}"
                  f"{speed:>26}{_fmt(row.get('l2_hit_rate_pct'), '.1f'):>10}"
                  f"{_fmt(None if dram is None else dram / 1e6, '.1f'):>14}"
                  f"{_fmt(row.get('predicted_l2_hit_rate_pct'), '.1f'):>11}")
    print(f"\ntimes and ncu figures: {report['labels']['time_ms']}; 'pred' columns: predicted (model H100-SXM)")
    print(f"wrote {out_dir / 'optimize_h100.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
