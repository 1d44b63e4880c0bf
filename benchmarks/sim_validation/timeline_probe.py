"""When each program of the matmul task kernel runs on the GPU: per-program SM and a global-timer stamp at every
k-step, for the streaming orders whose sharing the progress model gets wrong (README, "drift_probe").

    python -m benchmarks.sim_validation.timeline_probe OUT_DIR [--cases 8192x8192x8192,16384x16384x4096] [--orders row_major,column_major]

GPU only (inline PTX: %globaltimer, %smid). Same tiles, warps, stages and K loop as tasks/matmul/kernel.py's
GPU_CONFIG; the tile order comes from a table (the permutation swizzlelab's family gives), so one compiled kernel
serves every order. Writes OUT_DIR/timeline_<case>.npz (per order and run: SM int32[P], start int32[P] ns, step lengths int32[P, n_k]
ns, in launch order) and OUT_DIR/timeline_probe.json (kernel times with and without stamps, so the stamps' cost is on record;
what each launch was, in launch order, for a profiler wrapped around the probe).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from benchmarks.lab.timelines import order_table  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.tasks.matmul.kernel import GPU_CONFIG  # noqa: E402


@triton.jit
def _global_ns(x):
    # x only gives the asm an operand: the value is the SM's view of the global nanosecond timer.
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _sm_id(x):
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def stamped_matmul(a_ptr, b_ptr, c_ptr, order_ptr, t_ptr, sm_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAMP: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile = tl.load(order_ptr + pid)
    pid_m = tile // num_pid_n
    pid_n = tile % num_pid_n
    n_k = tl.cdiv(K, BLOCK_K)
    if STAMP:
        tl.store(sm_ptr + pid, _sm_id(pid))
        tl.store(t_ptr + pid * (n_k + 1), _global_ns(pid))
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_bn[None, :]
    for i in range(0, n_k):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
        if STAMP:
            tl.store(t_ptr + pid * (n_k + 1) + i + 1, _global_ns(pid))
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + offs_cm[:, None] * N + offs_cn[None, :], acc.to(tl.float16))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cases", default="8192x8192x8192,16384x16384x4096,16384x4096x8192,4096x16384x4096")
    parser.add_argument("--orders", default="row_major,column_major,grouped:GROUP_M=8")
    parser.add_argument("--repeats", type=int, default=2, help="stamped runs kept per order")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = GPU_CONFIG
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows = []
    started = time.time()
    for case in args.cases.split(","):
        m, n, k = (int(v) for v in case.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16, generator=gen)
        ref = (a[:256].float() @ b.float()).half()
        n_prog = (m // cfg.block_m) * (n // cfg.block_n)
        n_k = k // cfg.block_k
        arrays: dict[str, np.ndarray] = {}
        for order in args.orders.split(","):
            table = torch.from_numpy(order_table(order, m, n, k)).cuda()
            t = torch.full((n_prog, n_k + 1), -1, dtype=torch.int64, device="cuda")
            sm = torch.full((n_prog,), -1, dtype=torch.int32, device="cuda")

            def launch(stamp: bool) -> float:
                c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
                flush.random_(0, 255)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                stamped_matmul[(n_prog,)](a, b, c, table, t, sm, m, n, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                          BLOCK_K=cfg.block_k, STAMP=stamp, num_warps=cfg.num_warps,
                                          num_stages=cfg.num_stages)
                end.record()
                end.synchronize()
                ok = torch.allclose(c[:256].float(), ref.float(), atol=0.5, rtol=0.02)
                if not ok:
                    raise SystemExit(f"{case} {order}: wrong output")
                return start.elapsed_time(end)

            launch(False)
            launch(True)
            plain = [launch(False) for _ in range(5)]
            # What each launch was, in launch order: a profiler wrapped around the probe (replay_launch.py) pairs
            # its per-launch counters with the stamped runs through this list.
            launches = ["plain", "stamped"] + ["plain"] * 5 + [f"stamped_r{r}" for r in range(args.repeats)]
            stamped = []
            for r in range(args.repeats):
                t.fill_(-1)
                stamped.append(launch(True))
                times = t.cpu().numpy()
                if (times < 0).any():
                    raise SystemExit(f"{case} {order}: a stamp was not written")
                key = f"{order.replace(':', '_').replace('=', '')}_r{r}"
                # Start of each program (ns from the first) and each step's length: int32 compresses well.
                arrays[f"{key}_sm"] = sm.cpu().numpy()
                arrays[f"{key}_start"] = (times[:, 0] - times.min()).astype(np.int32)
                arrays[f"{key}_step"] = np.diff(times, axis=1).astype(np.int32)
            rows.append({"case": case, "order": order, "programs": n_prog, "k_steps": n_k,
                         "plain_ms": plain, "stamped_ms": stamped, "launches": launches})
            print(f"{case} {order}: measured on {torch.cuda.get_device_name()}: plain {np.median(plain):.3f} ms, "
                  f"stamped {np.median(stamped):.3f} ms", flush=True)
        np.savez_compressed(out / f"timeline_{case}.npz", **arrays)
    record = {"script": "benchmarks/sim_validation/timeline_probe.py",
              "command": " ".join(["python", "-m", "benchmarks.sim_validation.timeline_probe", *argv]),
              "device": torch.cuda.get_device_name(), "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
              "config": vars(cfg) if hasattr(cfg, "__dict__") else str(cfg), "kind": "measured",
              "rows": rows, "elapsed_s": time.time() - started}
    atomic_write_text(out / "timeline_probe.json", json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
