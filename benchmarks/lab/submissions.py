"""The example submissions' study kit, shared by benchmarks/submissions_h100's scripts: the step variants of histogram
and flash attention, their inputs and checks, the harness's timing of one variant, and its ncu profile in a child.

    python -m benchmarks.lab.submissions --variant NAME --result FILE    (the child profile_variant runs under ncu)
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.lab import REPO, child_env, module_command
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402

from swizzlelab.harness.correctness import case_sizes, derive_seed  # noqa: E402
from swizzlelab.harness.timing import t_quantile_975, time_fn  # noqa: E402
from swizzlelab.io import atomic_write_text, load_module  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402
from swizzlelab.tasks.checking import compare, tolerance_for  # noqa: E402

HIST_SUB = REPO / "examples/leaderboard/histogram/submission.py"

FLASH_SUB = REPO / "examples/leaderboard/flash_attention/submission.py"

# Besides the leaderboard's 13 lines: achieved occupancy, tensor-pipe activity, shared-memory atomic bank
# conflicts and the warp stall reasons (warps stalled per issued instruction, by reason).
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "barrier",
                 "math_pipe_throttle", "wait", "gmma", "not_selected", "selected", "dispatch_stall", "no_instruction")

EXTRA_METRICS = (
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum",
    "smsp__inst_executed.sum",
) + tuple(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS)


def load_submission(path: Path) -> Any:
    """Import a submission file as a module (the evaluator imports it the same way)."""
    return load_module(path, f"leader_{path.parent.name}", str(path))


def histogram_variants() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Step variants of histogram: the task kernel, tl.histogram (Triton), the CUDA shared-atomic kernel."""
    task = load_task("histogram")
    sub = load_submission(HIST_SUB)
    cuda = sub.CudaConfig
    out: dict[str, Callable[[dict[str, Any]], Any]] = {"hist.task_kernel": lambda d: task.custom_kernel(d)}
    for bc, br, rpp, warps in ((4, 1024, 8192, 8), (16, 256, 8192, 8)):
        out[f"hist.triton_keys_c{bc}_r{br}"] = (
            lambda d, bc=bc, br=br, rpp=rpp, w=warps: sub.histogram_triton(d["x"], d["out"], rpp, br, bc, w))
    for unroll in (4, 8, 16, 32):
        out[f"hist.cuda_u{unroll}_b33"] = lambda d, u=unroll: sub.histogram_cuda(d["x"], d["out"], cuda(unroll=u))
    out["hist.cuda_u16_b33_atomicflush"] = lambda d: sub.histogram_cuda(d["x"], d["out"], cuda(16, 33, True))
    out["hist.cuda_u16_b66"] = lambda d: sub.histogram_cuda(d["x"], d["out"], cuda(16, 66))
    out["hist.cuda_u16_b132"] = lambda d: sub.histogram_cuda(d["x"], d["out"], cuda(16, 132))
    out["hist.submission"] = sub.custom_kernel
    return out


def flash_variants(build: tuple[int, ...] | None = None) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Step variants of flash attention: the task kernel, pointer vs TMA loads, tile sizes, stages, warp spec.
    `build`: the CUDA variants to build (default: the submission's own BUILD_VARIANTS)."""
    task = load_task("flash_attention")
    sub = load_submission(FLASH_SUB)
    if build is not None:
        sub.BUILD_VARIANTS = tuple(build)
    cfg = sub.FlashConfig
    out: dict[str, Callable[[dict[str, Any]], Any]] = {"fa.task_kernel": lambda d: task.custom_kernel(d)}
    grid = [
        ("ptr_m128_n64_s3", cfg(128, 64, 8, 3, False, False)),
        ("ptr_m128_n128_s2", cfg(128, 128, 8, 2, False, False)),
        ("desc_m128_n64_s3", cfg(128, 64, 8, 3, True, False)),
        ("desc_m128_n64_s4", cfg(128, 64, 8, 4, True, False)),
        ("desc_m128_n128_s2", cfg(128, 128, 8, 2, True, False)),
        ("desc_m128_n128_s3", cfg(128, 128, 8, 3, True, False)),
        ("desc_m128_n64_s3_ws", cfg(128, 64, 8, 3, True, True)),
        ("desc_m128_n128_s2_ws", cfg(128, 128, 8, 2, True, True)),
        ("desc_m64_n128_w4_s3", cfg(64, 128, 4, 3, True, False)),
        ("desc_m256_n64_w16_s2", cfg(256, 64, 16, 2, True, False)),
        ("desc_m256_n128_w16_s2", cfg(256, 128, 16, 2, True, False)),
        # Step 2 (steps_2.json): QK prefetch, a 128-register cap for two programs per SM, smaller tiles.
        ("desc_m128_n64_s3_pf", cfg(128, 64, 8, 3, True, False, True)),
        ("desc_m128_n64_s2_r128", cfg(128, 64, 8, 2, True, False, False, 128)),
        ("desc_m128_n64_s2_pf_r128", cfg(128, 64, 8, 2, True, False, True, 128)),
        ("desc_m128_n128_s3_pf", cfg(128, 128, 8, 3, True, False, True)),
        ("desc_m128_n128_s2_pf", cfg(128, 128, 8, 2, True, False, True)),
        ("desc_m64_n64_w4_s2", cfg(64, 64, 4, 2, True, False)),
        ("desc_m64_n64_w4_s3_pf", cfg(64, 64, 4, 3, True, False, True)),
    ]
    for name, c in grid:
        out[f"fa.{name}"] = (lambda d, c=c: sub.flash_attention(d["q"], d["k"], d["v"], d["out"], d["sm_scale"], c))
    # Step 3 (steps_3.json): the sm_90a CUDA kernel (producer warpgroup + TMA ring, two wgmma consumer warpgroups).
    for vid in sub.CUDA_VARIANTS:
        out[f"fa.cuda_v{vid}"] = (lambda d, vid=vid: sub.flash_attention_cuda(d["q"], d["k"], d["v"], d["out"],
                                                                             d["sm_scale"], vid))
    out["fa.submission"] = sub.custom_kernel
    return out


def library_baselines() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Library rows: torch.bincount for histogram (the task's baseline), SDPA backends for attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    hist, flash = load_task("histogram"), load_task("flash_attention")

    def sdpa(backend: Any) -> Callable[[dict[str, Any]], Any]:
        def run(d: dict[str, Any]) -> Any:
            with sdpa_kernel([backend]):
                return torch.nn.functional.scaled_dot_product_attention(d["q"], d["k"], d["v"], scale=d["sm_scale"])
        return run

    return {
        "hist.baseline_torch": hist.baseline,
        "fa.baseline_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "fa.baseline_flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }


def all_variants(build: tuple[int, ...] | None = None) -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {**histogram_variants(), **flash_variants(build), **library_baselines()}


def task_of(name: str) -> str:
    return "histogram" if name.startswith("hist.") else "flash_attention"


class Inputs:
    """Ranked-seed inputs of each task's benchmark case, made once, with the reference output made once."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[dict[str, Any], dict[str, Any], Any]] = {}

    def get(self, task_name: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
        if task_name not in self.cache:
            self.cache.clear()  # one task's inputs at a time (flash attention's are 2 GiB)
            torch.cuda.empty_cache()
            task = load_task(task_name)
            case = task.cases("benchmarks")[0]
            seed = derive_seed(case["seed"], "ranked")
            data = task.generate_input({"seed": seed, **case_sizes(case)})
            ref = task.reference.ref_kernel(data)
            if task_name == "flash_attention":
                ref = ref.to(torch.float16)
            self.cache[task_name] = ({"seed": seed, **case_sizes(case)}, data, ref)
        return self.cache[task_name]


def checker(task_name: str, ref: Any) -> Callable[[Any], Any]:
    tol = tolerance_for(str(load_task(task_name).path / "reference.py"))
    return lambda output: compare(output, ref, tol)


def time_variant(name: str, fn: Callable[[dict[str, Any]], Any], inputs: Inputs, budget_s: float) -> dict[str, Any]:
    """Check, then time one variant; a variant that fails to compile or is wrong becomes a row with `error`."""
    task_name = task_of(name)
    case, data, ref = inputs.get(task_name)
    row: dict[str, Any] = {"name": name, "task": task_name, "case": case}
    started = time.perf_counter()
    try:
        timing = time_fn(fn, data, budget_s, check=checker(task_name, ref))
    except Exception as err:  # one broken variant must not end the sweep
        row["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:400]
        print(f"{name:42s} ERROR {row['error']}", flush=True)
        return row
    ci = t_quantile_975(timing.n - 1) * timing.sem_ms if timing.n > 1 else math.inf
    row.update(mean_ms=timing.mean_ms, ci95_ms=ci, std_ms=timing.std_ms, best_ms=timing.best_ms, n=timing.n,
               sem_ms=timing.sem_ms, stopped_by=timing.stopped_by, device=timing.device,
               check=timing.check_after, wall_s=time.perf_counter() - started)
    print(f"{name:42s} {timing.mean_ms:9.4f} ms +- {ci:.4f} (n={timing.n})", flush=True)
    return row


def profile_variant(name: str, out_dir: Path) -> dict[str, Any]:
    """Run one variant once under ncu in a child process (the harness's run_ncu) and keep every metric."""
    from swizzlelab.harness.ncu import NAMED_METRIC_IDS, NAMED_METRICS, run_ncu

    import tempfile

    result = Path(tempfile.mkdtemp(prefix="leader-child-")) / f"child-{name}.json"
    cmd = module_command("benchmarks.lab.submissions", "--variant", name, "--result", str(result))
    try:
        kernels = run_ncu(cmd, list(NAMED_METRIC_IDS) + list(EXTRA_METRICS), profile_from_start=False,
                          timeout_s=300, env=child_env())
    except Exception as err:
        return {"name": name, "error": f"{type(err).__name__}: {err}".splitlines()[0][:400]}
    verdict = json.loads(result.read_text()) if result.exists() else {"passed": False, "message": "no child result"}
    rows = []
    for k in kernels:
        named = k.named()
        extra = {m: k.values.get(m) for m in EXTRA_METRICS}
        launch = {m: v for m, v in k.values.items() if m.startswith("launch__") and m in (
            "launch__registers_per_thread", "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_registers",
            "launch__occupancy_limit_warps", "launch__shared_mem_per_block", "launch__grid_size",
            "launch__block_size", "launch__waves_per_multiprocessor")}
        rows.append({"kernel": k.kernel_name[:120], "named": named, "extra": extra, "launch": launch})
        print(f"  ncu {name}: {k.kernel_name[:50]} duration {named['Duration']} ns, DRAM {named['DRAM_Throughput']}%, "
              f"SM busy {named['SM_Busy']}%, occupancy {extra[EXTRA_METRICS[0]]}%", flush=True)
    _ = NAMED_METRICS
    return {"name": name, "check": verdict, "kernels": rows}


def child(name: str, result: str) -> int:
    """One warm run, then one run between cudaProfilerStart/Stop; writes the output check."""
    # A CUDA variant outside the submission's BUILD_VARIANTS is built alone for its profile.
    build = (int(name.removeprefix("fa.cuda_v")),) if name.startswith("fa.cuda_v") else None
    fn = all_variants(build)[name]
    inputs = Inputs()
    _, data, ref = inputs.get(task_of(name))
    for _ in range(2):
        fn(data)
    data["out"].fill_(-1 if data["out"].dtype == torch.int32 else float("nan"))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    output = fn(data)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    verdict = checker(task_of(name), ref)(output)
    atomic_write_text(result, json.dumps({"passed": bool(verdict.ok), "message": verdict.message}))
    return 0


def environment(argv: list[str]) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "command": "python -m benchmarks.submissions_h100.run " + " ".join(argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "label": f"measured ({torch.cuda.get_device_name(0)})",
        "timing": "swizzlelab.harness.timing.time_fn: CUDA events, L2 flush + output poison before each repetition, "
                  "SEM stop rule; ci95_ms = t(0.975, n-1) x sem",
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one warm and one profiled run of a variant (profile_variant's child)")
    parser.add_argument("--variant", required=True)
    parser.add_argument("--result", required=True)
    cli = parser.parse_args()
    sys.exit(child(cli.variant, cli.result))
