"""Why the task kernel with a barrier between waves and K alternation timed 2% slower than Triton's grouped-8 while
the probe with the same two changes timed 7% faster: every combination, timed against the task kernel's grouped-8.

    python -m benchmarks.matmul_kdir_h100.sync_variants OUT_JSON [--order 'serpentine>column_major@16x4'] [--time-s 3]
        [--repeat N]
Kernels: the task's (tasks/matmul/kernel.py: K_WAVE branch recomputes each k-block's address), run.py's probe (the
same recomputation in both directions), and `step_kernel` here (one loop for both directions: pointers start at the
first k-block of the program's direction and move by +-BLOCK_K, as the task's forward loop does). Interleaved timing
with L2 flushes (harness.timing.compare_interleaved), outputs checked; matmul 8192^3 fp16 on the local GPU.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.harness.timing import TimingOptions, compare_interleaved  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.swizzle import apply_swizzle  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402
from swizzlelab.tasks.matmul.kernel import (GPU_CONFIG, wait_for_previous_wave, with_k_alternation,  # noqa: E402
                                            with_wave_sync)

from benchmarks.lab import kdir as probe  # noqa: E402

WAVE = probe.WAVE


@triton.jit
def step_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, REVERSE: tl.constexpr, WAVE: tl.constexpr,
    done_ptr=None, SYNC: tl.constexpr = 0,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    GROUP_M = 8
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + pid % num_pid_in_group % group_size_m
    pid_n = pid % num_pid_in_group // group_size_m
    wave = tl.program_id(0) // WAVE
    if SYNC:
        wait_for_previous_wave(done_ptr, wave, WAVE)
    n_k = tl.cdiv(K, BLOCK_K)
    backwards = (wave % 2) * REVERSE == 1
    first = tl.where(backwards, n_k - 1, 0)
    step = tl.where(backwards, -1, 1)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (first * BLOCK_K + offs_k[None, :]) * stride_ak
    b_ptrs = b_ptr + (first * BLOCK_K + offs_k[:, None]) * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, n_k):
        k_left = K - (first + step * i) * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += step * BLOCK_K * stride_ak
        b_ptrs += step * BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
    if SYNC:
        tl.atomic_add(done_ptr + wave, 1, sem="release")


def step_launcher(task, order: str, alternate: bool, sync: bool):
    kernel = apply_swizzle(step_kernel, task.parse_order(order))

    def run(data):
        a, b, out = data["a"], data["b"], data["out"]
        m, k = a.shape
        n = b.shape[1]
        grid = (triton.cdiv(m, probe.BM) * triton.cdiv(n, probe.BN),)
        done = torch.zeros(-(-grid[0] // WAVE), dtype=torch.int32, device=a.device) if sync else None
        kernel[grid](a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0),
                     out.stride(1), BLOCK_M=probe.BM, BLOCK_N=probe.BN, BLOCK_K=probe.BK, REVERSE=int(alternate),
                     WAVE=WAVE, done_ptr=done, SYNC=int(sync), num_warps=probe.WARPS, num_stages=probe.STAGES)
        return out

    return run


def task_launcher(task, order: str, alternate: bool, sync: bool):
    cfg = GPU_CONFIG
    cfg = with_k_alternation(cfg, WAVE) if alternate else cfg
    cfg = with_wave_sync(cfg, WAVE) if sync else cfg
    formula = task.parse_order(order)
    return lambda data: task.custom_kernel(data, formula, cfg)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--order", default="serpentine>column_major@16x4")
    parser.add_argument("--time-s", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=1, help="run the whole list this many times, in turn")
    args = parser.parse_args(argv)
    task = load_task("matmul")
    data = task.generate_input(probe.CASE)
    device = torch.cuda.get_device_name(0)
    base = task_launcher(task, "grouped:GROUP_M=8", False, False)
    o = args.order
    variants = [
        ("task", o, True, False, task_launcher), ("task", o, False, True, task_launcher),
        ("task", o, True, True, task_launcher), ("probe", o, True, True, None),
        ("step", o, True, True, step_launcher), ("step", o, False, True, step_launcher),
        ("step", "grouped:GROUP_M=8", False, False, step_launcher),
    ]
    record = {"script": "benchmarks/matmul_kdir_h100/sync_variants.py",
              "command": "python -m benchmarks.matmul_kdir_h100.sync_variants " + shlex.join(argv),
              "device": device, "case": probe.CASE, "base": "task kernel, grouped:GROUP_M=8, K forwards, no barrier",
              "label": f"measured ({device}; CUDA events, interleaved, L2 flushed)", "rows": []}
    for rep, (kernel, order, alternate, sync, make) in [(r, v) for r in range(args.repeat) for v in variants]:
        if make is None:
            fn = probe.launcher(task, order, WAVE if alternate else 0, False, sync)
        else:
            fn = make(task, order, alternate, sync)
        cmp = compare_interleaved(base, fn, data, budget_s=args.time_s, check_a=lambda out: task.check(data, out),
                                  check_b=lambda out: task.check(data, out), options=TimingOptions(sample_clock=True))
        row = {"round": rep, "kernel": kernel, "order": order, "k_alternate": alternate, "wave_sync": sync,
               "speedup": cmp.speedup, "ci95": [cmp.ci_low, cmp.ci_high], "base_ms": cmp.a.mean_ms,
               "variant_ms": cmp.b.mean_ms, "n": cmp.a.n,
               "gpu_clock": cmp.a.gpu_clock if hasattr(cmp.a, "gpu_clock") else None}
        record["rows"].append(row)
        print(json.dumps(row), flush=True)
        atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
