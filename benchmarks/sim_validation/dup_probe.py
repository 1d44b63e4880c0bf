"""What a line read from both L2 partitions costs an H100's (or H200's) L2: the capacity cliff of data every SM reads
(shared) against data each SM reads alone (disjoint), measured with ncu and predicted by the simulator on the same
accesses.

    python benchmarks/sim_validation/dup_probe.py OUT_DIR [--sizes-mb 8,16,...] [--passes 4] [--no-predict]
        [--chunk-bytes 256 --stride-bytes 32768]

GPU only (ncu; the prediction runs the simulator's GPU engine where CuPy is present). One program per SM sweeps a
float32 buffer of S bytes `passes` times through L2 (.cg loads skip L1): in `shared` every program sweeps all of it,
in `disjoint` each sweeps its own 1/132 share. The first pass is cold; the later passes read from DRAM only what the
L2 lost, so (DRAM read - S) / (passes - 1) / S is the share of the buffer the L2 could not keep. The model keeps a
far partition's line twice (home and near copy): where every SM reads a line, each line takes two slots, so its
cliff sits near half the L2; where one SM reads it, half the lines (the far-homed ones) take two. With
--chunk-bytes C --stride-bytes S the buffer's data lies in C-byte chunks S bytes apart (as a matmul tile's rows lie
in its operand), so the same sweeps ask how the L2 spreads strided lines over its sets.
Writes OUT_DIR/dup_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.harness.ncu import run_ncu
from swizzlelab.hw import HardwareModel, get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import gpu, simulate
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo

METRICS = ["lts__t_sector_hit_rate.pct", "dram__bytes_read.sum", "lts__t_sectors.sum",
           "lts__t_sectors_srcunit_ltcfabric.sum", "lts__t_sectors_lookup_hit.sum", "lts__t_sectors_lookup_miss.sum",
           "gpu__time_duration.sum"]
PATTERNS = ("disjoint", "shared")
BLOCK = 1024  # float32 elements a program loads per step: 4 KiB, 32 lines
LINE = 128


def buffer_elems(size_mb: float, n_programs: int) -> int:
    """Elements of a buffer of about `size_mb` MiB, a whole number of steps for each of `n_programs` programs."""
    per_prog = max(1, int(size_mb * 2**20 / 4 / n_programs // BLOCK))
    return per_prog * BLOCK * n_programs


def child(args) -> int:
    """Launch every (pattern, size) twice (ncu profiles the second: --launch-skip is per kernel name)."""
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def dup_sweep(x_ptr, out_ptr, per_prog, n_elems, passes, SHARED: tl.constexpr, BLOCK: tl.constexpr,
                  CHUNK: tl.constexpr, STRIDE: tl.constexpr):
        pid = tl.program_id(0)
        start = 0 if SHARED else pid * per_prog
        length = n_elems if SHARED else per_prog
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(passes):
            for off in range(0, length, BLOCK):
                g = start + off + offs
                acc += tl.load(x_ptr + (g // CHUNK) * STRIDE + g % CHUNK, cache_modifier=".cg")
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    # --dry-run: 4 programs on the CPU under the Triton interpreter (TRITON_INTERPRET=1), to check the kernel's sums.
    dev = "cpu" if args.dry_run else "cuda"
    n_prog = 4 if args.dry_run else torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device=dev).manual_seed(7)
    for pattern in PATTERNS:
        for mb in args.sizes:
            n = buffer_elems(mb, n_prog)
            chunk, stride = args.chunk_bytes // 4, args.stride_bytes // 4
            x = torch.rand(n // chunk * stride, device=dev, generator=gen)
            per_prog = n // n_prog
            for _ in range(2):
                out = torch.full((n_prog,), float("nan"), device=dev)
                dup_sweep[(n_prog,)](x, out, per_prog, n, args.passes, SHARED=pattern == "shared", BLOCK=BLOCK,
                                     CHUNK=chunk, STRIDE=stride, num_warps=8)
                if not args.dry_run:
                    torch.cuda.synchronize()
            # Every program's sum checks that it read what it was meant to (a sweep cut short fails here).
            g = torch.arange(n, device=dev)
            xs = x[(g // chunk) * stride + g % chunk].double()
            want = (xs.sum().expand(n_prog) if pattern == "shared" else xs.view(n_prog, per_prog).sum(1)) * args.passes
            if not torch.allclose(out.double(), want, rtol=1e-3):
                raise SystemExit(f"{pattern} {mb} MB: wrong sums")
            del x
    return 0


def predict(model: HardwareModel, sizes: list[float], passes: int, n_prog: int, chunk_bytes: int = BLOCK * 4,
            stride_bytes: int = BLOCK * 4) -> list[dict]:
    """The simulator's `model` on the same sweeps (one program per SM, identity order)."""
    engine = "gpu" if gpu.unavailable_reason() is None else "auto"
    rows = []
    lines_per_step = BLOCK * 4 // LINE
    for pattern in PATTERNS:
        for mb in sizes:
            n_lines = buffer_elems(mb, n_prog) * 4 // LINE
            per = n_lines // n_prog
            per_chunk, per_stride = chunk_bytes // LINE, stride_bytes // LINE
            logical = np.arange(n_lines, dtype=np.int64)
            one_pass = (logical // per_chunk) * per_stride + logical % per_chunk
            if pattern == "shared":
                per_tile = np.tile(one_pass, passes)
                lines = np.tile(per_tile, n_prog)
            else:
                lines = np.concatenate([np.tile(one_pass[p * per:(p + 1) * per], passes) for p in range(n_prog)])
            steps_per_tile = lines.size // n_prog // lines_per_step
            trace = AccessTrace(
                lines=lines, sector_mask=np.full(lines.size, 15, dtype=np.uint8),
                is_write=np.zeros(lines.size, dtype=bool),
                step_ptr=np.arange(0, lines.size + 1, lines_per_step, dtype=np.int64),
                tile_step_ptr=np.arange(0, n_prog * steps_per_tile + 1, steps_per_tile, dtype=np.int64),
                tensors=[TensorInfo("x", 0, int(one_pass[-1]) + 1, 4)], grid=(n_prog,),
                meta={"source": "dup_probe"})
            t0 = time.time()
            res = simulate(trace, np.arange(n_prog), model, occupancy=1, engine=engine)
            size = n_lines * LINE
            rows.append({"pattern": pattern, "size_mb": mb, "buffer_bytes": size,
                         "predicted_l2_hit_pct": 100 * res.l2_hit_rate,
                         "predicted_dram_read_bytes": int(res.dram_read_bytes),
                         "predicted_lost_share": (res.dram_read_bytes - size) / (passes - 1) / size,
                         "predicted_far_per_requested": res.fabric_bytes / res.requested_bytes,
                         "predict_s": time.time() - t0})
            print(f"predicted ({res.model}) {pattern:8s} {mb:5.1f} MiB: hit {rows[-1]['predicted_l2_hit_pct']:.1f}% "
                  f"lost {rows[-1]['predicted_lost_share']:.3f} far {rows[-1]['predicted_far_per_requested']:.3f}",
                  flush=True)
            del trace, lines
    return rows


def add_predictions(record: dict) -> None:
    """Predict a run's sweeps (its record's sizes, passes, programs and layout) with the simulator's model of the GPU
    that measured it (H200 or H100) as it is now, adding the predictions to its rows."""
    model = get_model("h200" if "H200" in record.get("device", "") else "h100")
    rows = record["rows"]
    predicted = predict(model, [r["size_mb"] for r in rows if r["pattern"] == PATTERNS[0]], record["passes"],
                        record["programs"], record.get("chunk_bytes", BLOCK * 4), record.get("stride_bytes", BLOCK * 4))
    for row, p in zip(rows, predicted):
        row.update({k: v for k, v in p.items() if k.startswith("predict")})
    record["predicted_by"] = f"simulator model {model.name}, {model.l2_set_map} set map (occupancy 1, identity order)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--sizes-mb", default="8,16,20,24,28,32,36,40,44,48,56,64")
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--no-predict", action="store_true")
    parser.add_argument("--chunk-bytes", type=int, default=BLOCK * 4, help="bytes of data in a row (multiple of 128)")
    parser.add_argument("--stride-bytes", type=int, default=BLOCK * 4, help="bytes from one row to the next")
    parser.add_argument("--predict-only", default=None, metavar="MEASURED_JSON",
                        help="predict the rows of an earlier run's JSON again (the model may have changed); no ncu")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true", help="with --child: the interpreter on the CPU, no ncu")
    args = parser.parse_args(argv)
    args.sizes = [float(s) for s in args.sizes_mb.split(",")]
    if args.chunk_bytes % LINE or args.stride_bytes % LINE or args.stride_bytes < args.chunk_bytes:
        parser.error("--chunk-bytes and --stride-bytes must be multiples of 128, the stride at least the chunk")
    if args.child:
        return child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.predict_only:
        record = json.loads(Path(args.predict_only).read_text())
        add_predictions(record)
        record["predict_command"] = " ".join(["python", "benchmarks/sim_validation/dup_probe.py", *argv])
        atomic_write_text(out / "dup_probe.json", json.dumps(record, indent=1))
        return 0
    started = time.time()
    child_cmd = [sys.executable, __file__, str(out), "--sizes-mb", args.sizes_mb, "--passes", str(args.passes),
                 "--chunk-bytes", str(args.chunk_bytes), "--stride-bytes", str(args.stride_bytes), "--child"]
    try:
        launches = run_ncu(child_cmd, METRICS, kernel_regex="dup_sweep", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    # The raw page carries every device attribute too: keep the metrics asked for.
    reports = {k.launch_index: {name: k.values[name] for name in METRICS if name in k.values} for k in launches}
    import torch

    n_prog = torch.cuda.get_device_properties(0).multi_processor_count
    names = [(p, mb) for p in PATTERNS for mb in args.sizes]
    rows = []
    for (pattern, mb), launch in zip(names, sorted(reports)[1::2]):
        m = reports[launch]
        size = buffer_elems(mb, n_prog) * 4
        requested = size * (n_prog if pattern == "shared" else 1) * args.passes / 32
        rows.append({"pattern": pattern, "size_mb": mb, "buffer_bytes": size, "metrics": m,
                     "measured_l2_hit_pct": m["lts__t_sector_hit_rate.pct"],
                     "measured_dram_read_bytes": m["dram__bytes_read.sum"],
                     "measured_lost_share": (m["dram__bytes_read.sum"] - size) / (args.passes - 1) / size,
                     "measured_far_per_requested": m["lts__t_sectors_srcunit_ltcfabric.sum"] / requested})
        print(f"measured (ncu, {torch.cuda.get_device_name()}) {pattern:8s} {mb:5.1f} MiB: hit "
              f"{rows[-1]['measured_l2_hit_pct']:.1f}% lost {rows[-1]['measured_lost_share']:.3f} far "
              f"{rows[-1]['measured_far_per_requested']:.3f}", flush=True)
    record = {"script": "benchmarks/sim_validation/dup_probe.py",
              "command": " ".join(["python", "benchmarks/sim_validation/dup_probe.py", *argv]),
              "device": torch.cuda.get_device_name(), "kind": "measured (ncu, caches flushed) and predicted",
              "programs": n_prog, "passes": args.passes, "block_bytes": BLOCK * 4, "chunk_bytes": args.chunk_bytes,
              "stride_bytes": args.stride_bytes, "metrics": METRICS, "rows": rows}
    atomic_write_text(out / "dup_probe.json", json.dumps(record, indent=1))
    if not args.no_predict:
        add_predictions(record)
    record["elapsed_s"] = time.time() - started
    atomic_write_text(out / "dup_probe.json", json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
