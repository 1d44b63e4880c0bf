"""How fast a user's kernel is traced by derivation (a few programs interpreted at the real size, an affine fit,
checked) against interpreting every program, for each tests/wild kernel (CPU only; measured on this machine).

Times are CPU seconds of the process, torch on one thread (wall seconds kept beside: the machine is shared).
Small sizes: derived and fully interpreted traces, timed and checked equal array for array. Real sizes: derived
only, the full interpretation's time estimated from interpreting a few of its programs (per-program seconds x
programs), except where one is marked `full` (interpreted whole, checked equal, and estimated too). Each case
runs in a fresh subprocess (its own memory and numba cache load). Writes JSON and prints a table.
Usage: nice -n 10 python benchmarks/trace_derive/run.py [--out benchmarks/trace_derive/trace_derive_cpu.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from swizzlelab.harness.sysinfo import cpu_name
from swizzlelab.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
WILD = ROOT / "tests" / "wild"
SMALL_MATMUL = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}
QKV = ["q=float16[Z,H,N,D]", "k=float16[Z,H,N,D]", "v=float16[Z,H,N,D]"]
QKV_06 = ["q=float16[Z,H,S,D]", "k=float16[Z,H,S,D]", "v=float16[Z,H,S,D]"]
AB = ["a=float16[M,K]", "b=float16[K,N]"]
T09 = "triton_09_persistent_matmul.py:matmul_kernel_persistent"
T06 = "triton_06_fused_attention.py:_attn_fwd"
T06_ARGS = {"causal": False, "sm_scale": 0.5}

# (label, file[:kernel], inputs, mode): mode "small" = derived and full, "real" = derived + estimated full, "full" = both
# measured at that size, and the estimate too (to show how far it is off). inputs: task or --tensor specs, sizes,
# scalars, config (None: first autotune config), launch (the wrapper), builder (an --inputs FILE:FUNCTION, in
# tests/wild), target (the model the file's driver queries are answered as; default h100).
# Every kernel file in tests/wild has a small row (tests/test_benchmark_results.py checks).
CASES = [
    ("tutorial_matmul 500x470x100, 32x32x32 blocks", "tutorial_matmul.py",
     {"task": "matmul", "sizes": {"m": 500, "n": 470, "k": 100}, "config": SMALL_MATMUL}, "small"),
    ("persistent_matmul 2048x1280x256", "persistent_matmul.py",
     {"task": "matmul", "sizes": {"m": 2048, "n": 1280, "k": 256}}, "small"),
    ("attention_fwd Z2 H3 N1024 D64", "attention_fwd.py",
     {"tensors": QKV, "sizes": {"Z": 2, "H": 3, "N": 1024, "D": 64}, "scalars": {"sm_scale": 0.5}}, "small"),
    ("row_sum 1001x300 fp32", "row_sum.py", {"tensors": ["x=float32[R,C]"], "sizes": {"R": 1001, "C": 300}}, "small"),
    # the published files, unedited
    ("triton_01 vector add N=98000 fp32", "triton_01_vector_add.py",
     {"tensors": ["x=float32[N]", "y=float32[N]"], "sizes": {"N": 98000}}, "small"),
    ("triton_03 matmul 500x470x100, 32x32x32 blocks", "triton_03_matmul.py",
     {"task": "matmul", "sizes": {"m": 500, "n": 470, "k": 100}, "config": SMALL_MATMUL}, "small"),
    ("triton_06 attention Z1 H3 S1024 D64, 64x32 blocks", T06,
     {"tensors": QKV_06, "sizes": {"Z": 1, "H": 3, "S": 1024, "D": 64}, "scalars": T06_ARGS,
      "config": {"BLOCK_M": 64, "BLOCK_N": 32}}, "small"),
    ("triton_08 grouped GEMM 3 problems, 32x32x32 blocks, 16 programs", "triton_08_grouped_gemm.py:grouped_matmul_kernel",
     {"tensors": ["group_A=[float16[256,64],float16[128,128],float16[96,32]]",
                  "group_B=[float16[64,128],float16[128,64],float16[32,160]]"], "sizes": {}, "launch": "group_gemm_fn",
      "config": {**SMALL_MATMUL, "NUM_SM": 16}}, "small"),
    ("triton_09 persistent matmul 1024x768x128, 32x32x32 blocks", T09,
     {"tensors": AB, "sizes": {"M": 1024, "N": 768, "K": 128}, "launch": "matmul_persistent", "config": SMALL_MATMUL},
     "small"),
    ("rocm_xcd matmul 512x512x64 (MI300X)", "rocm_xcd_matmul_kernel.py",
     {"tensors": AB, "sizes": {"M": 512, "N": 512, "K": 64}, "launch": "rocm_xcd_launch.py:matmul",
      "target": "mi300x"}, "small"),
    ("rocm_gemm (heuristics) 512x512x64, 32x32x32 blocks", "rocm_gemm.py",
     {"tensors": [*AB, "c=float16[M,N]"], "sizes": {"M": 512, "N": 512, "K": 64},
      "scalars": {"a_scale": None, "b_scale": None}, "config": SMALL_MATMUL}, "small"),
    ("applied_ai fused MoE M=256 E=8 N=256 K=64 top2", "applied_ai_fused_moe.py",
     {"sizes": {"M": 256, "E": 8, "N": 256, "K": 64, "top_k": 2, "block_m": 16}, "launch": "invoke_fused_moe_kernel",
      "builder": "moe_inputs.py:moe_inputs"}, "small"),
    # issue 55: kernels of other projects (the tests/test_wild_published.py rows' small sizes)
    ("vllm triton_scaled_mm 128x96x64, 32x32x32 blocks", "vllm_triton_scaled_mm.py",
     {"tensors": ["input=float16[M,K]", "weight=float16[K,N]", "scale_a=float32[1,1]", "scale_b=float32[1,1]"],
      "sizes": {"M": 128, "N": 96, "K": 64}, "scalars": {"out_dtype": "torch.float16"}, "config": SMALL_MATMUL},
     "small"),
    ("torchao int8 matmul 128x96x64", "torchao_intmm_triton.py:matmul_kernel_with_block_pointers",
     {"sizes": {"M": 128, "N": 96, "K": 64}, "builder": "torchao_inputs.py:intmm_inputs"}, "small"),
    ("inductor output_code.py mm (the file's largest launch)", "inductor_mm_output_code.py", {"sizes": {}}, "small"),
    ("tritonbench stream-K (CUDA) 128x96x64, 32x32x32 blocks", "tritonbench_stream_k.py:streamk_cuda_gemm",
     {"tensors": ["a=float16[M,K]", "b=float16[N,K]"], "sizes": {"M": 128, "N": 96, "K": 64},
      "config": {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}}, "small"),
    ("batch_invariant persistent matmul 128x96x64, 32x32x32 blocks", "batch_invariant_ops.py:matmul_kernel_persistent",
     {"tensors": AB, "sizes": {"M": 128, "N": 96, "K": 64}, "config": SMALL_MATMUL}, "small"),
    ("liger int8 x int2 matmul 96x64x128, autotune config 14", "liger_mm_int8int2.py",
     {"tensors": ["a=int8[M,K]", "b=uint8[K4,N]"], "sizes": {"M": 96, "N": 64, "K": 128, "K4": 32},
      "autotune_index": 14}, "small"),
    # larger and real sizes
    ("tutorial_matmul 2048^3, autotune config 0", "tutorial_matmul.py",
     {"task": "matmul", "sizes": {"m": 2048, "n": 2048, "k": 2048}}, "full"),
    ("tutorial_matmul 4096^3, autotune config 0", "tutorial_matmul.py",
     {"task": "matmul", "sizes": {"m": 4096, "n": 4096, "k": 4096}}, "full"),
    ("tutorial_matmul 8192^3, autotune config 0", "tutorial_matmul.py",
     {"task": "matmul", "sizes": {"m": 8192, "n": 8192, "k": 8192}}, "real"),
    ("persistent_matmul 8192^3", "persistent_matmul.py",
     {"task": "matmul", "sizes": {"m": 8192, "n": 8192, "k": 8192}}, "real"),
    ("attention_fwd Z4 H32 N4096 D64", "attention_fwd.py",
     {"tensors": QKV, "sizes": {"Z": 4, "H": 32, "N": 4096, "D": 64}, "scalars": {"sm_scale": 0.125}}, "real"),
    ("row_sum 16384x8192 fp32", "row_sum.py", {"tensors": ["x=float32[R,C]"], "sizes": {"R": 16384, "C": 8192}},
     "real"),
    ("triton_03 matmul 8192^3, autotune config 0", "triton_03_matmul.py",
     {"task": "matmul", "sizes": {"m": 8192, "n": 8192, "k": 8192}}, "real"),
    ("triton_09 persistent matmul 8192^3, first config", T09,
     {"tensors": AB, "sizes": {"M": 8192, "N": 8192, "K": 8192}, "launch": "matmul_persistent"}, "real"),
    ("triton_06 attention Z4 H32 S4096 D64, first config", T06,
     {"tensors": QKV_06, "sizes": {"Z": 4, "H": 32, "S": 4096, "D": 64}, "scalars": T06_ARGS}, "real"),
]
QUICK = {"small"}
SAMPLE_PROGRAMS = 8  # programs interpreted to estimate a full interpretation's time


def _open(file: str, inputs: dict):
    from swizzlelab.hw import get_model
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_tensor_spec
    from swizzlelab.userkernel.launch import parse_scalar

    builder = f"{WILD / inputs['builder']}" if "builder" in inputs else None
    launch = inputs.get("launch")
    if launch and ".py:" in launch:
        launch = f"{WILD / launch}"
    scalars = dict(parse_scalar(f"{k}={v}") if isinstance(v, str) else (k, v) for k, v in inputs.get("scalars", {}).items())
    made = Inputs(tuple(parse_tensor_spec(t) for t in inputs.get("tensors", ())), scalars,
                  dict(inputs["sizes"]), seed=1, task=load_task(inputs["task"]) if "task" in inputs else None,
                  builder=builder)
    return open_user_kernel(str(WILD / file), get_model(inputs.get("target", "h100")), config=inputs.get("config"),
                            autotune_index=inputs.get("autotune_index"), launch=launch, inputs=made)


def _seconds_per_program(uk, n: int) -> float:
    """CPU seconds one of the launch's `n` programs takes when all are interpreted (lines recorded), from a
    spread sample of them."""
    from swizzlelab.trace.tracer import run_guarded, record_accesses

    name = uk.launcher.kernel.jit_fn.fn.__name__
    sample = sorted({int(i) for i in (j * n // SAMPLE_PROGRAMS for j in range(SAMPLE_PROGRAMS))})
    launch = uk.launcher
    start = time.process_time()
    with record_accesses(True, choose=lambda kernel, before, grid: sample if kernel == name else None):
        with launch.forced():
            run_guarded(lambda: launch.wrapper(**launch.arguments), "wrapper")
    return (time.process_time() - start) / len(sample)


def run_one(file: str, inputs: dict, mode: str) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(1)  # one core: the CPU seconds are those of one thread
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()  # as the CLI does first: a file importing Triton through another package gets this one
    from swizzlelab.userkernel.user_trace import trace_user_kernel

    uk = _open(file, inputs)
    start, cpu = time.perf_counter(), time.process_time()
    derived = trace_user_kernel(uk.launcher, uk.site, source=uk.analysed or None)
    derived_wall, derived_s = time.perf_counter() - start, time.process_time() - cpu
    how = derived.how
    row = {
        "mode": mode, "file": f"tests/wild/{file}", "inputs": inputs, "config": uk.choice.label(),
        "launch_grid": list(derived.launch_grid), "tile_grid": list(derived.order.grid),
        "programs": derived.n_programs, "tiles": int(derived.order.perm.size),
        "accesses": int(derived.trace.n_accesses), "how": how.describe(),
        "derived": how.derivation is not None, "interpreted_programs": how.interpreted_programs,
        "fallback_reason": how.reason or None,
        "derived_seconds": round(derived_s, 3), "derived_wall_seconds": round(derived_wall, 3),
    }
    if mode in ("small", "full"):
        start, cpu = time.perf_counter(), time.process_time()
        full = trace_user_kernel(uk.launcher, uk.site, source=uk.analysed or None, derive=False)
        row["interpreted_seconds"] = round(time.process_time() - cpu, 3)
        row["interpreted_wall_seconds"] = round(time.perf_counter() - start, 3)
        row["interpreted_kind"] = "measured: every program interpreted"
        row["equal"] = derived.trace.tensors == full.trace.tensors and all(
            np.array_equal(getattr(derived.trace, k), getattr(full.trace, k))
            for k in ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr"))
    if mode == "full":  # the estimate the real-size rows use, next to what it estimates
        del derived, full
        row["interpreted_estimate_seconds"] = round(_seconds_per_program(uk, row["programs"]) * row["programs"], 1)
    if mode == "real":
        del derived
        per_program = _seconds_per_program(uk, row["programs"])
        row["interpreted_seconds"] = round(per_program * row["programs"], 1)
        row["interpreted_kind"] = (f"estimate: {per_program:.3f} CPU s per program (mean of {SAMPLE_PROGRAMS} spread "
                                   f"programs interpreted at this size) x {row['programs']} programs; laying the "
                                   "lines out not included")
    row["speedup"] = round(row["interpreted_seconds"] / derived_s, 1)
    row["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).with_name("trace_derive_cpu.json")))
    parser.add_argument("--quick", action="store_true", help="the small sizes only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--add", action="append", default=[],
                        help="run only the cases whose label starts with this, replacing or adding their rows in --out")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(*json.loads(args.one))))
        return
    results, before = [], {}
    if args.add:  # the rows of the other cases are kept as the last full run wrote them
        before = json.loads(Path(args.out).read_text())
        results = [r for r in before["results"] if not any(r.get("label", "").startswith(a) for a in args.add)]
    for label, file, inputs, mode in CASES:
        if (args.quick and mode not in QUICK) or (args.add and not any(label.startswith(a) for a in args.add)):
            continue
        proc = subprocess.run([sys.executable, __file__, "--one", json.dumps([file, inputs, mode])],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            results.append({"label": label, "mode": mode, "error": tail})
            print(f"{label:46s} FAILED: {tail}", flush=True)
            continue
        row = {"label": label, **json.loads(proc.stdout.strip().splitlines()[-1])}
        results.append(row)
        equal = {True: "equal", False: "DIFFER"}.get(row.get("equal"), "")
        kind = "measured" if "measured" in row["interpreted_kind"] else "estimated"
        if "interpreted_estimate_seconds" in row:
            kind += f"; estimate {row['interpreted_estimate_seconds']:.1f} s"
        print(f"{label:46s} {row['accesses']:>12,d} accesses  derived {row['derived_seconds']:7.2f} s  "
              f"interpreted {row['interpreted_seconds']:8.1f} s ({kind})  x{row['speedup']:<7} {equal}", flush=True)
    report = {
        "what": "tracing a user's kernel (tests/wild) by derivation vs by interpreting every program; Triton "
                "interpreter on the CPU, no GPU involved; *_seconds are CPU seconds of the process (user + system: "
                "one core, whatever else the machine runs), *_wall_seconds wall-clock; one process per case",
        "device": f"CPU: {cpu_name()}",
        "command": " ".join(["python", *sys.argv]),
        "script": "benchmarks/trace_derive/run.py",
        "python": platform.python_version(),
        "results": sorted(results, key=lambda r: [c[0] for c in CASES].index(r["label"])
                          if r["label"] in [c[0] for c in CASES] else len(CASES)),
    }
    if args.add:  # rows added to an earlier run: its command stays, this one is listed after it
        report["command"] = before["command"]
        report["added"] = [*before.get("added", []), " ".join(["python", *sys.argv])]
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
