"""Where the matmul's missing L2 lookups go: ncu counts fewer L2 sector lookups than the kernel requests (less the
fabric's), by 1-27% depending on the order. Runs the task kernel's tiles and K loop under ncu with the loads
through L1 (default), around it (cache_modifier .cg) and without software pipelining (num_stages 1: plain loads).

    python -m benchmarks.sim_validation.lookup_probe OUT_DIR [--size 4096] [--orders row_major,grouped:GROUP_M=8,diagonal]

GPU only (needs ncu). Writes OUT_DIR/lookup_probe.json: per variant and order, the ncu counters and the requested
sectors, and OUT_DIR/ncu_metrics.txt: the L1/L2 metric names this ncu offers for the chip.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.lab import child_env, module_command
from benchmarks.lab.validation import lookup_deficit
from swizzlelab.io import atomic_write_text

METRICS = [
    "lts__t_sectors.sum", "lts__t_sectors_srcunit_tex.sum", "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_lookup_hit.sum", "lts__t_sectors_lookup_miss.sum", "lts__t_sector_hit_rate.pct",
    "lts__t_sectors_op_read.sum", "dram__bytes_read.sum", "l1tex__t_sectors.sum", "l1tex__t_sector_hit_rate.pct",
    "l1tex__m_xbar2l1tex_read_sectors.sum", "smsp__inst_executed_op_ldgsts.sum", "smsp__inst_executed_op_global_ld.sum",
    # The L2 request coalescer (LRC) between the crossbar and the L2 slices: read requests it merged in hardware.
    "lrc__xbar2lrc_requests_op_read.sum", "lrc__request_sectors_op_read_coalescable.sum",
    "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum", "lrc__lrc2xbar_sectors_op_read.sum",
    "lrc__lrc2xbar_sectors_op_read_coalescing_achieved.sum", "lrc__lrc2xbar_sectors_op_read_coalescing_none.sum",
    "lrc__lts2lrc_sectors_op_read.sum", "lrc__xbar2gpc_sectors_op_read.sum",
    "lrc__xbar2gpc_sectors_op_read_coalescing_achieved_type_hardware.sum",
]
# (name, cache_modifier, num_stages): kernels are compiled per variant, so ncu's kernel names tell them apart.
VARIANTS = (("default", "", 3), ("cg", ".cg", 3), ("plain", "", 1))


def child(args) -> int:
    """Launch every (variant, order) once after a warm-up, under ncu (the parent's command)."""
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    import torch
    import triton
    import triton.language as tl

    from benchmarks.lab.timelines import order_table

    @triton.jit
    def probe_matmul(a_ptr, b_ptr, c_ptr, order_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, CACHE: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        tile = tl.load(order_ptr + pid)
        pid_m = tile // num_pid_n
        pid_n = tile % num_pid_n
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]
        b_ptrs = b_ptr + offs_k[:, None] * N + offs_bn[None, :]
        for _ in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, cache_modifier=CACHE)
            b = tl.load(b_ptrs, cache_modifier=CACHE)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * N
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + offs_cm[:, None] * N + offs_cn[None, :], acc.to(tl.float16))

    n = args.size
    gen = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=gen)
    ref = (a[:256].float() @ b.float()).half()
    for name, cache, stages in VARIANTS:
        for order in args.orders.split(","):
            table = torch.from_numpy(order_table(order, n, n, n)).cuda()
            for _ in range(2):  # the first launch compiles; ncu profiles the second (--launch-skip 1 per name)
                c = torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda")
                probe_matmul[(table.numel(),)](a, b, c, table, n, n, n, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                               CACHE=cache, num_warps=8, num_stages=stages)
                torch.cuda.synchronize()
            if not torch.allclose(c[:256].float(), ref.float(), atol=0.5, rtol=0.02):
                raise SystemExit(f"{name} {order}: wrong output")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--orders", default="row_major,grouped:GROUP_M=8,diagonal")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    query = subprocess.run([ncu, "--query-metrics", "--chip", "gh100"], capture_output=True, text=True)
    offered = {ln.split()[0] for ln in query.stdout.splitlines() if ln.strip() and "__" in ln.split()[0]}
    wanted = sorted(name for name in offered if name.startswith(("lts__t_sectors", "l1tex__t_sectors", "lrc__",
                                                                 "l1tex__m_", "smsp__inst_executed_op")))
    (out / "ncu_metrics.txt").write_text("\n".join(wanted) + "\n")
    # A metric this ncu does not offer would stop the whole run: keep the ones it lists.
    metrics = [m for m in METRICS if m.rsplit(".", 1)[0] in offered] if offered else METRICS
    started = time.time()
    cmd = [ncu, "--metrics", ",".join(metrics), "--csv", "--cache-control", "all", "--clock-control", "base",
           "--kernel-name", "regex:probe_matmul",
           *module_command("benchmarks.sim_validation.lookup_probe", str(out), "--size", str(args.size),
                           "--orders", args.orders, "--child")]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**child_env(), "PYTHONUNBUFFERED": "1"})
    text = run.stdout[run.stdout.find('"ID"'):] if '"ID"' in run.stdout else ""
    if run.returncode or not text:
        print(run.stdout[-3000:], run.stderr[-3000:])
        return 1
    reports: dict[int, dict] = {}
    for rec in csv.DictReader(io.StringIO(text)):
        r = reports.setdefault(int(rec["ID"]), {"kernel": rec["Kernel Name"], "metrics": {}})
        value = rec["Metric Value"].replace(",", "")
        try:
            r["metrics"][rec["Metric Name"]] = float(value)
        except ValueError:
            r["metrics"][rec["Metric Name"]] = value
    # Launch IDs in child order: variant x order x (warm-up, profiled): keep every second one.
    names = [(v[0], o) for v in VARIANTS for o in args.orders.split(",")]
    ids = sorted(reports)
    rows = []
    n = args.size
    requested = (n // 128) ** 2 * (n // 64) * 2 * 128 * 64 * 2 // 32 + n * n * 2 // 32
    for (variant, order), launch in zip(names, ids[1::2]):
        m = reports[launch]["metrics"]
        rows.append({"variant": variant, "order": order, "kernel": reports[launch]["kernel"], "metrics": m,
                     "requested_sectors": requested,
                     "lookup_deficit": lookup_deficit(m, requested)})
        merged = m.get("lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum", 0) / requested
        print(f"measured (ncu, base clocks) {variant:8s} {order:18s} deficit {rows[-1]['lookup_deficit']:.3f} hit {m['lts__t_sector_hit_rate.pct']}% "
              f"lrc hw-coalesced {merged:.3f} dram {m['dram__bytes_read.sum'] / 1e9:.3f} GB", flush=True)
    import torch

    record = {"script": "benchmarks/sim_validation/lookup_probe.py",
              "command": " ".join(["python", "-m", "benchmarks.sim_validation.lookup_probe", *argv]),
              "device": torch.cuda.get_device_name(), "kind": "measured (ncu, base clocks, caches flushed)",
              "size": n, "variants": [list(v) for v in VARIANTS], "metrics": metrics, "rows": rows,
              "elapsed_s": time.time() - started}
    atomic_write_text(out / "lookup_probe.json", json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
