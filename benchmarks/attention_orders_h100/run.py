"""GPU benchmark of the flash_attention and lean_attention tasks: correctness at benchmark size, kernel time per
block order, torch SDPA baselines, an interleaved A/B with a 95% CI, and (--sweep) a launch-config sweep.

Run on a CUDA machine:  python benchmarks/attention_orders_h100/run.py OUTDIR [--sweep] [--budget-s 2]
On the CPU (interpreter) `--cases tests` checks every order on the small test cases and times nothing.
Writes OUTDIR/attention_orders_h100.json (device, command, script, every figure labelled) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402

from swizzlelab.harness.sysinfo import system_info  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.swizzle import parse_formula  # noqa: E402
from swizzlelab.tasks.checking import compare  # noqa: E402
from swizzlelab.tasks.registry import Task, load_task  # noqa: E402

ORDERS = {
    # column_major runs the same query block of consecutive heads together: the transposed grid, expected slower.
    "flash_attention": ["identity", "column_major", "grouped:GROUP_M=4", "hilbert:SIDE=8"],
    "lean_attention": ["identity", "reversed", "xcd:NUM_XCDS=8", "xcd:NUM_XCDS=2"],
}
REVERSED = "pid = tl.num_programs(0) - 1 - tl.program_id(0)\n"
FLASH_SWEEP = [(bn, st, w) for bn in (64, 128) for st in (2, 3, 4) for w in (4, 8)]
LEAN_SWEEP = [(bn, st, w) for bn in (32, 64, 128) for st in (2, 3, 4) for w in (4, 8)]
LEAN_PROGRAMS_PER_SM = (1, 2, 3, 4, 6)


def order_formula(task: Task, spec: str) -> Any:
    if spec == "identity":
        return None
    if spec == "reversed":
        return parse_formula(REVERSED, ("pid",))
    return task.parse_order(spec)


def work_figures(task: Task, data: dict[str, Any]) -> dict[str, float]:
    """FLOPs (flash) or bytes (lean) of one call, for throughput columns."""
    if task.name == "flash_attention":
        batch, heads, seq, head_dim = data["q"].shape
        return {"flops": 4.0 * batch * heads * seq * seq * head_dim}
    batch, heads, head_dim = data["q"].shape
    kv_heads = data["k"].shape[1]
    kv_bytes_unique = sum(data["ctx_lens_list"]) * kv_heads * head_dim * 2 * 2
    return {
        "kv_bytes_unique": float(kv_bytes_unique),
        # Each query head streams its group's KV: what DRAM would carry with no L2 reuse across query heads.
        "kv_bytes_per_query_head": float(kv_bytes_unique * (heads // kv_heads)),
    }


def throughput(task: Task, work: dict[str, float], ms: float) -> str:
    if task.name == "flash_attention":
        return f"{work['flops'] / (ms * 1e-3) / 1e12:7.1f} TFLOP/s"
    return f"{work['kv_bytes_unique'] / (ms * 1e-3) / 1e9:7.0f} GB/s (unique KV)"


def baselines(task: Task) -> dict[str, Callable[[dict[str, Any]], Any]]:
    if task.name != "flash_attention":
        return {"torch SDPA per batch element": task.baseline}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def with_backend(backend: Any) -> Callable[[dict[str, Any]], Any]:
        def run(data: dict[str, Any]) -> Any:
            with sdpa_kernel([backend]):
                return task.baseline(data)

        return run

    return {
        "torch SDPA (default)": task.baseline,
        "torch SDPA flash backend": with_backend(SDPBackend.FLASH_ATTENTION),
        "torch SDPA cuDNN backend": with_backend(SDPBackend.CUDNN_ATTENTION),
    }


def time_or_note(fn: Callable[[dict[str, Any]], Any], data: dict[str, Any], budget_s: float, check: Callable[[Any], Any] | None) -> dict[str, Any]:
    """A Timing dict (measured on this GPU), or an error note for a config that does not compile / run."""
    from swizzlelab.harness.timing import time_fn

    try:
        timing = time_fn(fn, data, budget_s, check=check)
    except Exception as err:  # e.g. shared memory exhausted by a sweep config: record, go on
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]}
    return timing.to_dict(with_samples=False)


def run_case(task: Task, case: dict[str, Any], on_gpu: bool, budget_s: float, sweep: bool) -> dict[str, Any]:
    data = task.generate_input(case)
    started = time.perf_counter()
    expected = task.ref_kernel(data).to(torch.float16)
    record: dict[str, Any] = {"case": case, "reference_s": time.perf_counter() - started, "orders": [], "baselines": [], "sweep": []}
    work = work_figures(task, data)
    record["work"] = work
    tolerance = task.spec.tolerance

    def checker(reference: torch.Tensor) -> Callable[[Any], Any]:
        return lambda output: compare(output, reference, tolerance)

    for spec in ORDERS[task.name]:
        order = order_formula(task, spec)
        data["out"].fill_(float("nan"))
        verdict = compare(task.custom_kernel(data, order), expected, tolerance)
        row: dict[str, Any] = {"order": spec, "check": verdict.message, "ok": verdict.ok}
        if on_gpu and verdict.ok:
            row["timing"] = time_or_note(lambda d, o=order: task.custom_kernel(d, o), data, budget_s, checker(expected))
        record["orders"].append(row)

    if on_gpu:
        for name, fn in baselines(task).items():
            try:
                verdict = compare(fn(data).to(torch.float16).contiguous(), expected, tolerance)
            except Exception as err:  # a backend torch cannot run for this shape / GPU
                record["baselines"].append({"name": name, "error": f"{type(err).__name__}: {err}"[:300]})
                continue
            record["baselines"].append({"name": name, "check": verdict.message, "timing": time_or_note(fn, data, budget_s, None)})
        timed = [r for r in record["orders"] if "mean_ms" in r.get("timing", {})]
        if len(timed) > 1:
            best = min(timed[1:], key=lambda r: r["timing"]["mean_ms"])
            record["ab"] = interleaved(task, data, best["order"], budget_s, checker(expected))
        if sweep:
            record["sweep"] = run_sweep(task, case, data, budget_s, checker(expected))
    return record


def interleaved(task: Task, data: dict[str, Any], spec: str, budget_s: float, check: Callable[[Any], Any]) -> dict[str, Any]:
    """identity (A) vs the fastest other order (B), interleaved with L2 flushes: speedup with a 95% CI."""
    from swizzlelab.harness.timing import compare_interleaved

    order = order_formula(task, spec)
    comparison = compare_interleaved(
        lambda d: task.custom_kernel(d, None), lambda d: task.custom_kernel(d, order), data,
        budget_s=2 * budget_s, check_a=check, check_b=check,
    )
    return {"a": "identity", "b": spec, **comparison.to_dict(with_samples=False)}


def run_sweep(task: Task, case: dict[str, Any], data: dict[str, Any], budget_s: float, check: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """Identity-order kernel time over launch configs that keep the tile grid (flash: BLOCK_M stays 128)."""
    base = task.kernel.GPU_CONFIG
    rows = []
    grid = FLASH_SWEEP if task.name == "flash_attention" else LEAN_SWEEP
    for block_n, stages, warps in grid:
        config = replace(base, block_n=block_n, num_stages=stages, num_warps=warps)
        timing = time_or_note(lambda d, c=config: task.custom_kernel(d, None, config=c), data, budget_s / 2, check)
        rows.append({"block_n": block_n, "num_stages": stages, "num_warps": warps, "n_programs": data.get("n_programs"), "timing": timing})
    if task.name == "lean_attention":
        n_sms = torch.cuda.get_device_properties(0).multi_processor_count
        original = data["n_programs"]
        for per_sm in LEAN_PROGRAMS_PER_SM:
            data["n_programs"] = per_sm * n_sms
            timing = time_or_note(lambda d: task.custom_kernel(d, None), data, budget_s / 2, check)
            rows.append({"block_n": base.block_n, "num_stages": base.num_stages, "num_warps": base.num_warps, "n_programs": data["n_programs"], "timing": timing})
        data["n_programs"] = original
    return rows


def print_table(results: list[dict[str, Any]], label: str) -> None:
    print(f"\nAll times {label}; throughput derived from the mean.")
    for block in results:
        task = load_task(block["task"])
        for record in block["cases"]:
            print(f"\n{block['task']}  {task.case_label(record['case'])}")
            rows = [(f"order {r['order']}", r.get("timing"), r["check"]) for r in record["orders"]]
            rows += [(b["name"], b.get("timing"), b.get("check", b.get("error", ""))) for b in record["baselines"]]
            for name, timing, note in rows:
                if timing and "mean_ms" in timing:
                    ms = timing["mean_ms"]
                    print(f"  {name:34s} {ms:9.3f} ms +- {timing['sem_ms']:.3f}  {throughput(task, record['work'], ms)}")
                else:
                    print(f"  {name:34s} {'not timed':>9s}     {(timing or {}).get('error', note)[:90]}")
            if "ab" in record:
                ab = record["ab"]
                print(f"  A/B identity vs {ab['b']}: speedup {ab['speedup']:.4f} (95% CI {ab['ci95'][0]:.4f}..{ab['ci95'][1]:.4f})")
            for row in record["sweep"]:
                timing = row["timing"]
                text = f"{timing['mean_ms']:9.3f} ms" if "mean_ms" in timing else timing.get("error", "")[:80]
                print(f"  sweep block_n={row['block_n']:3d} stages={row['num_stages']} warps={row['num_warps']} programs={row['n_programs']}: {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--cases", choices=("benchmarks", "tests"), default="benchmarks")
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing budget per measurement (s)")
    parser.add_argument("--sweep", action="store_true", help="also sweep block_n / stages / warps (and lean n_programs)")
    parser.add_argument("--tasks", default="flash_attention,lean_attention")
    args = parser.parse_args(argv)

    info = system_info()
    on_gpu = info.is_gpu
    label = info.measured_label()
    started = time.time()
    results = []
    for name in args.tasks.split(","):
        task = load_task(name)
        cases = [run_case(task, case, on_gpu, args.budget_s, args.sweep and on_gpu) for case in task.cases(args.cases)]
        results.append({"task": name, "cases": cases})
    payload = {
        "script": "benchmarks/attention_orders_h100/run.py",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": info.gpu if on_gpu else f"CPU ({info.cpu}), Triton interpreter: correctness only, nothing timed",
        "label": label,
        "system": info.to_dict(),
        "wall_s": time.time() - started,
        "results": results,
    }
    out_path = args.out_dir / "attention_orders_h100.json"
    atomic_write_text(out_path, json.dumps(payload, indent=1, default=str))
    print_table(results, label)
    print(f"\nwrote {out_path} in {payload['wall_s']:.0f} s")
    failed = [r for block in results for case in block["cases"] for r in case["orders"] if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
