"""The child the ncu studies profile: it launches every order of one task case once, in turn, inside one profiler
range, after checking each order's output; and what ncu's launch limits say of the kernel's occupancy.

    python -m benchmarks.lab.ncu_launch TASK CASE_JSON ORDERS_JSON RESULT_JSON     (as child_command gives it)
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.lab import module_command
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.hw import measured_occupancy  # noqa: E402

CORE_METRICS = ("lts__t_sector_hit_rate.pct", "dram__bytes_read.sum", "dram__bytes_write.sum")
METRICS = (
    "lts__t_sector_hit_rate.pct",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sectors.sum",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__registers_per_thread",
)


def compiled_resources(jit_fn: Any) -> dict[str, int] | None:
    """(registers/thread, shared bytes, warps) of the first compiled variant of a Triton jit function."""
    for cache in getattr(jit_fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for compiled in getattr(kernels, "values", lambda: [])():
            try:
                compiled._init_handles()
                return {
                    "n_regs": int(compiled.n_regs),
                    "n_spills": int(compiled.n_spills),
                    "shared_bytes": int(compiled.metadata.shared),
                    "num_warps": int(compiled.metadata.num_warps),
                }
            except Exception:  # older/newer Triton layouts: report nothing rather than guess
                return None
    return None


def warm_and_check(task: Any, data: dict[str, Any], spec: str, formula: Any) -> dict[str, Any]:
    """Compile and run the order once more (poisoned output each time), outside the profiled range, and check the
    output: {"order", "passed", "message"}."""
    from swizzlelab.harness.correctness import poison_

    for _ in range(2):
        poison_(data.get("out"))
        output = task.custom_kernel(data, formula)
    verdict = task.check(data, output)
    return {"order": spec, "passed": bool(getattr(verdict, "ok", verdict)),
            "message": str(getattr(verdict, "message", ""))}


def run_child(task_name: str, case: dict[str, Any], orders: list[str], result_path: str) -> int:
    from swizzlelab.io import atomic_write_text
    from swizzlelab.runtime import device
    from swizzlelab.tasks import load_task

    on_gpu = device() == "cuda"
    task = load_task(task_name)
    data = task.generate_input(case)
    formulas = [task.parse_order(spec) for spec in orders]
    per_order = [{**warm_and_check(task, data, spec, formula),
                  "resources": compiled_resources(task.kernel.kernel_for(formula)) if on_gpu else None}
                 for spec, formula in zip(orders, formulas)]
    launch_profiled(task, data, formulas, on_gpu)
    atomic_write_text(result_path, json.dumps({"orders": per_order}))
    return 0


def launch_profiled(task: Any, data: dict[str, Any], formulas: list[Any], on_gpu: bool, launches: int = 1) -> None:
    """Launch every order `launches` times in turn between cudaProfilerStart and Stop (what ncu profiles with
    --profile-from-start off), synchronising after each launch so that no two overlap."""
    import torch

    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    for _ in range(launches):
        for formula in formulas:
            task.custom_kernel(data, formula)
            if on_gpu:
                torch.cuda.synchronize()
    if on_gpu:
        torch.cuda.profiler.stop()


def occupancy_of(kernel_metrics: Any, verdict: dict, fallback: int) -> tuple[int, str]:
    """Resident programs per SM: ncu's launch limits, else the compiled kernel's resources, else `fallback`."""
    limits = ([kernel_metrics.values.get(m) for m in METRICS if m.startswith("launch__occupancy_limit")]
              if kernel_metrics is not None else [])
    return measured_occupancy(limits, verdict.get("resources"), fallback)


def device_info() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
                            "l2_cache_bytes": getattr(props, "L2_cache_size", None),
                            "total_memory_bytes": props.total_memory, "torch": torch.__version__}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,ecc.mode.current,memory.total,clocks.max.memory,"
                              "driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = smi.stdout.strip()
        # Which chip: two chips of one kind can rank a pair of orders differently (placement probe, README).
        ids = subprocess.run(["nvidia-smi", "--query-gpu=uuid,serial", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        info["gpu_uuid_serial"] = ids.stdout.strip()
    except Exception as err:  # noqa: BLE001
        info["nvidia_smi"] = f"unavailable: {err}"
    try:
        from swizzlelab.harness.ncu import find_ncu

        info["ncu_version"] = subprocess.run([find_ncu(), "--version"], capture_output=True, text=True,
                                             timeout=30).stdout.strip().splitlines()[-1]
    except Exception as err:  # noqa: BLE001
        info["ncu_version"] = f"unavailable: {err}"
    return info


def child_command(task_name: str, case: dict[str, Any], orders: list[str], result_path: str) -> list[str]:
    """The command of the child that launches `orders` of (task, case) and writes its verdicts to `result_path`
    (run it with benchmarks.lab.child_env() as its environment)."""
    return module_command("benchmarks.lab.ncu_launch", task_name, json.dumps(case), json.dumps(orders),
                          str(result_path))


if __name__ == "__main__":
    task_arg, case_arg, orders_arg, result_arg = sys.argv[1:5]
    sys.exit(run_child(task_arg, json.loads(case_arg), json.loads(orders_arg), result_arg))
