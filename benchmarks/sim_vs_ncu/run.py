"""Validate the L2 simulator against Nsight Compute: predicted vs measured L2 hit rate and DRAM read bytes.

For each task case, one child process launches the kernel under every order in sequence inside one
cudaProfilerStart/Stop range, `ncu` profiles those launches (cold L2: ncu's default --cache-control all),
kernels are matched to orders by launch order, and the simulator predicts the same launches.

GPU run (the lead, on the H100; ~4-6 minutes):
    python -m benchmarks.sim_vs_ncu.run OUT_DIR --device-tag h100
CPU check of everything but ncu (tiny sizes under the Triton interpreter, ~20 s):
    python -m benchmarks.sim_vs_ncu.run /tmp/simcheck --dry-run
The child is benchmarks/lab/ncu_launch.py, which benchmarks/sim_validation and benchmarks/sim_gpu launch too.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from benchmarks.lab import child_env  # noqa: E402
from benchmarks.lab.ncu_launch import CORE_METRICS, METRICS, child_command, occupancy_of  # noqa: E402
from swizzlelab.sim.agreement import RANK_TOL_PP, summarize  # noqa: E402

ORDERS = ("row_major", "column_major", "grouped:GROUP_M=8", "hilbert:SIDE=8", "diagonal")
GPU_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("matmul", {"seed": 11, "m": 4096, "n": 4096, "k": 4096}),
    ("matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192}),
    ("transpose", {"seed": 11, "m": 16384, "n": 16384, "dtype": "float16"}),
    ("transpose", {"seed": 12, "m": 16384, "n": 16384, "dtype": "float32"}),
)
DRY_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("matmul", {"seed": 1, "m": 64, "n": 48, "k": 32}),
    ("transpose", {"seed": 1, "m": 64, "n": 48, "dtype": "float32"}),
)


def measure(task_name: str, case: dict[str, Any], orders: list[str], workdir: Path, dry_run: bool) -> tuple[list[dict], list[Any]]:
    """(child verdicts per order, ncu KernelMetrics per order or Nones) for one case."""
    result_path = workdir / f"child_{task_name}_{case['seed']}.json"
    cmd = child_command(task_name, case, orders, str(result_path))
    if dry_run:
        subprocess.run(cmd, check=True, env=child_env())
        kernels: list[Any] = [None] * len(orders)
    else:
        from swizzlelab.harness.ncu import run_ncu

        from swizzlelab.errors import UserError

        report = workdir / f"ncu_{task_name}_{case['seed']}.ncu-rep"
        try:
            kernels = run_ncu(cmd, list(METRICS), profile_from_start=False, timeout_s=420, report_path=report,
                              env=child_env())
        except UserError as err:  # e.g. a metric this ncu does not know: retry with the three that matter
            print(f"ncu with all metrics failed ({err}); retrying with {', '.join(CORE_METRICS)}", file=sys.stderr)
            kernels = run_ncu(cmd, list(CORE_METRICS), profile_from_start=False, timeout_s=420, report_path=report,
                              env=child_env())
        if len(kernels) != len(orders):
            names = ", ".join(k.kernel_name for k in kernels[:8])
            raise SystemExit(f"ncu profiled {len(kernels)} kernels for {len(orders)} orders ({names}); cannot match")
    verdicts = json.loads(result_path.read_text())["orders"]
    return verdicts, kernels


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory for sim_vs_ncu_<tag>.json and the ncu reports")
    parser.add_argument("--dry-run", action="store_true", help="no ncu: tiny sizes, checks the CPU parts")
    parser.add_argument("--device-tag", default=None, help="file-name tag (default: from the GPU name)")
    parser.add_argument("--occupancy", type=int, default=1, help="used when the kernel's own is unknown")
    parser.add_argument("--keep-reports", action="store_true", help="keep the .ncu-rep files under OUT_DIR")
    parser.add_argument("--only", default=None, help="comma list of task names to run (default: all)")
    args = parser.parse_args(argv)

    import torch

    from swizzlelab.hw import get_model
    from swizzlelab.io import atomic_write_text
    from swizzlelab.scenario import load_scenario
    from swizzlelab.sim import footprint_of, simulate

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # ncu reports and child verdicts are scratch unless asked for: keep them out of the repository.
    workdir = out_dir / "sim_vs_ncu_reports" if args.keep_reports else Path(tempfile.mkdtemp(prefix="sim_vs_ncu_"))
    workdir.mkdir(parents=True, exist_ok=True)
    on_gpu = torch.cuda.is_available() and not args.dry_run
    if not on_gpu and not args.dry_run:
        raise SystemExit("no CUDA GPU: run with --dry-run to check the CPU parts")
    device_name = torch.cuda.get_device_name(0) if on_gpu else f"cpu ({platform.processor() or 'unknown'}), dry run"
    tag = args.device_tag or ("h100" if "H100" in device_name else "h200" if "H200" in device_name else
                              "dryrun" if args.dry_run else device_name.split()[-1].lower())
    model = get_model("h200" if "H200" in device_name else "h100")
    cases = DRY_CASES if args.dry_run else GPU_CASES
    if args.only:
        keep = set(args.only.split(","))
        cases = tuple(c for c in cases if c[0] in keep)

    started = time.time()
    rows: list[dict[str, Any]] = []
    summaries = []
    for task_name, case in cases:
        scenario = load_scenario(task_name, case, target=model.aliases[0], gpu_name="")
        t0 = time.time()
        verdicts, kernels = measure(task_name, case, list(ORDERS), workdir, args.dry_run)
        measure_s = time.time() - t0
        t0 = time.time()
        trace = scenario.trace
        footprint = footprint_of(trace)
        case_rows = []
        for spec, verdict, km in zip(ORDERS, verdicts, kernels):
            perm = scenario.permutation(spec)
            occupancy, occupancy_source = occupancy_of(km, verdict, args.occupancy)
            pred = simulate(trace, perm, model, occupancy=occupancy, footprint=footprint)
            pred_occ1 = pred if occupancy == 1 else simulate(trace, perm, model, occupancy=1, footprint=footprint)
            # The same L2 as one undivided LRU: shows what modelling the two partitions buys.
            pred_one = simulate(trace, perm, replace(model, l2_partitions=1), occupancy=occupancy, footprint=footprint)
            measured_hit = km.values.get("lts__t_sector_hit_rate.pct") if km is not None else None
            measured_read = km.values.get("dram__bytes_read.sum") if km is not None else None
            row = {
                "task": task_name,
                "case": case,
                "order": spec,
                "permutation_id": perm.id,
                "target": model.name,
                "occupancy": occupancy,
                "occupancy_source": occupancy_source,
                "predicted_l2_hit_pct": 100 * pred.l2_hit_rate,
                "measured_l2_hit_pct": measured_hit,
                "predicted_dram_read_bytes": pred.dram_read_bytes,
                "measured_dram_read_bytes": measured_read,
                "predicted_dram_write_bytes": pred.dram_write_bytes,
                "measured_dram_write_bytes": km.values.get("dram__bytes_write.sum") if km is not None else None,
                "predicted_l2_lookup_sectors": pred.per_domain[0].lookup_sectors if pred.per_domain else None,
                "measured_l2_sectors": km.values.get("lts__t_sectors.sum") if km is not None else None,
                "predicted_occupancy1_l2_hit_pct": 100 * pred_occ1.l2_hit_rate,
                "predicted_occupancy1_dram_read_bytes": pred_occ1.dram_read_bytes,
                "predicted_one_partition_l2_hit_pct": 100 * pred_one.l2_hit_rate,
                "predicted_one_partition_dram_read_bytes": pred_one.dram_read_bytes,
                "compulsory_bytes": pred.compulsory_bytes,
                "requested_bytes": pred.requested_bytes,
                "kernel_name": km.kernel_name if km is not None else None,
                "output_correct": verdict["passed"],
                "resources": verdict.get("resources"),
                "device": device_name,
                "predicted_by": f"predicted (model {model.name})",
                "measured_by": f"measured ({device_name}, ncu)" if km is not None else None,
            }
            case_rows.append(row)
        summary = summarize(case_rows)
        summary.update(task=task_name, case=case, measure_s=measure_s, simulate_s=time.time() - t0,
                       line_accesses=int(trace.lines.size))
        summaries.append(summary)
        rows += case_rows
        print_case(task_name, case, case_rows, summary, device_name if on_gpu else "", model.name)

    errors = [abs(r["predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in rows
              if r["measured_l2_hit_pct"] is not None]
    errors_one = [abs(r["predicted_one_partition_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in rows
                  if r["measured_l2_hit_pct"] is not None]
    record = {
        "script": "benchmarks/sim_vs_ncu/run.py",
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.sim_vs_ncu.run", *argv]),
        "device": device_name,
        "model": model.name,
        "model_source": model.source,
        "dry_run": args.dry_run,
        "orders": list(ORDERS),
        "metrics": list(METRICS),
        "mean_abs_error_pp": sum(errors) / len(errors) if errors else None,
        "mean_abs_error_one_partition_pp": sum(errors_one) / len(errors_one) if errors_one else None,
        "rankings_match": (all(s["ranking_matches"] is not False for s in summaries) if errors else None),
        "ranking_rule": f"every pair of orders differing by > {RANK_TOL_PP} pp in both is ordered alike",
        "cases": summaries,
        "rows": rows,
        "elapsed_s": time.time() - started,
    }
    path = out_dir / f"sim_vs_ncu_{tag}.json"
    atomic_write_text(path, json.dumps(record, indent=2, default=str))
    mae = record["mean_abs_error_pp"]
    print(f"\nmean |predicted - measured| L2 hit: {'n/a (dry run)' if mae is None else f'{mae:.2f} pp'}; "
          f"rankings match ncu in every case: {record['rankings_match']}; wrote {path}")
    return 0


def _fmt(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / scale:.{digits}f}"


def print_case(task_name: str, case: dict, rows: list[dict], summary: dict, device: str, model: str) -> None:
    sizes = " ".join(f"{k}={v}" for k, v in case.items() if k != "seed")
    against = f"measured ({device}, ncu)" if device else "dry run: nothing measured"
    print(f"\n{task_name} {sizes}   predicted (model {model}) vs {against}")
    print(f"{'order':<20}{'occ':>4}{'pred hit%':>11}{'meas hit%':>11}{'pred rd GB':>12}{'meas rd GB':>12}{'ok':>4}")
    for r in rows:
        print(f"{r['order']:<20}{r['occupancy']:>4}{_fmt(r['predicted_l2_hit_pct']):>11}"
              f"{_fmt(r['measured_l2_hit_pct']):>11}{_fmt(r['predicted_dram_read_bytes'], 1e9, 2):>12}"
              f"{_fmt(r['measured_dram_read_bytes'], 1e9, 2):>12}{'y' if r['output_correct'] else 'N':>4}")
    if summary["mae_pp"] is not None:
        print(f"MAE {summary['mae_pp']:.2f} pp, ranking matches: {summary['ranking_matches']} "
              f"({summary['pairs_concordant']} pairs agree, {summary['pairs_discordant']} disagree), "
              f"Kendall tau hit {summary['kendall_tau_hit']:.2f}, DRAM {summary['kendall_tau_dram']:.2f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
