"""Published kernel files optimized on a GPU exactly as a user types it (`swizzlelab optimize ... --kernel FILE
--target auto`, no environment variable set) at their real sizes, then their best_kernel.py opened again by
`swizzlelab eval`; per kernel the command, exit code, seconds, trace method, timeline, the orders it raced and the
best order's measured speedup with its 95% CI. README.md gives the commands; RUNS each kernel's size.

Usage: python -m benchmarks.wild_gpu.run OUT_DIR [--only NAME ...] [--timeout-s 540] [--budget 4] [--time-budget T]
       [--small];  python -m benchmarks.wild_gpu.run --merge A.json B.json ... --out wild_gpu_<device>.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks.lab.commands import ROOT, run_command, sizes, swizzlelab_command

WILD = Path("tests") / "wild"  # relative to ROOT, where the commands run: as a user in the checkout types them
MATMUL_SIZES = sizes(m=8192, n=8192, k=8192)
ATTENTION = ["--tensor", "q=float16[Z,H,S,D]", "--tensor", "k=float16[Z,H,S,D]", "--tensor", "v=float16[Z,H,S,D]",
             "--arg", "causal=False", "--arg", "sm_scale=0.5", *sizes(Z=4, H=32, S=4096, D=64)]
GEMM_TENSORS = ["--tensor", "a=float16[M,K]", "--tensor", "b=float16[K,N]"]
# name -> (what it is, the arguments after `swizzlelab optimize`); "{out}" is the run's folder
RUNS = {
    "t03": ("Triton tutorial 03 matmul, 8192^3 fp16",
            ["matmul", "--kernel", str(WILD / "triton_03_matmul.py"), *MATMUL_SIZES]),
    "t09": ("Triton tutorial 09 persistent matmul (_compute_pid twice), 8192^3 fp16",
            ["matmul", "--kernel", f"{WILD / 'triton_09_persistent_matmul.py'}:matmul_kernel_persistent",
             "--launch", "matmul_persistent", *MATMUL_SIZES]),
    "t06": ("Triton tutorial 06 attention forward, Z=4 H=32 N_CTX=4096 D=64 fp16",
            ["--kernel", f"{WILD / 'triton_06_fused_attention.py'}:_attn_fwd", *ATTENTION]),
    # issue 55: published kernels beyond Triton's tutorials, each at 8192^3 as typed (one flag at most)
    "vllm": ("vLLM triton_scaled_mm (its launcher's heuristic tiles), 8192^3 fp16, per-row and per-column scales",
             ["--kernel", str(WILD / "vllm_triton_scaled_mm.py"), "--tensor", "input=float16[M,K]",
              "--tensor", "weight=float16[K,N]", "--tensor", "scale_a=float32[M,1]", "--tensor", "scale_b=float32[N,1]",
              "--arg", "out_dtype=torch.float16", *sizes(M=8192, N=8192, K=8192)]),
    "torchao": ("torchao int8 matmul (GROUP_M reassigned at its site), 8192^3, 128x128x64 blocks, 3 stages, 8 warps",
                ["--kernel", f"{WILD / 'torchao_intmm_triton.py'}:matmul_kernel_with_block_pointers",
                 "--inputs", f"{WILD / 'torchao_inputs.py'}:intmm_inputs",
                 *sizes(M=8192, N=8192, K=8192, block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=8)]),
    "inductor": ("torch.compile(mode=max-autotune) output_code.py of relu(x @ w1) @ w2, 8192^3 fp16, made on this GPU "
                 "first (tests/wild/make_inductor_output.py)",
                 ["--kernel", "{out}/output_code.py"]),
    "batch_invariant": ("batch_invariant_ops persistent matmul (SM count from torch.accelerator), 8192^3 fp16",
                        ["--kernel", f"{WILD / 'batch_invariant_ops.py'}:matmul_kernel_persistent", *GEMM_TENSORS,
                         *sizes(M=8192, N=8192, K=8192)]),
    "liger": ("Liger-Kernel int8 x packed int2 matmul (its own @triton.autotune), 8192^3",
              ["--kernel", str(WILD / "liger_mm_int8int2.py"), "--tensor", "a=int8[M,K]", "--tensor", "b=uint8[K4,N]",
               *sizes(M=8192, N=8192, K=8192, K4=2048)]),
    "streamk": ("tritonbench stream-K (CUDA, TMA descriptors; both remaps take the order), 8448x8448x8192 fp16: "
                "66x66 tiles of 128 are 33 full waves of 132 SMs, every tile in the data-parallel phase",
                ["--kernel", f"{WILD / 'tritonbench_stream_k.py'}:streamk_cuda_gemm", "--tensor", "a=float16[M,K]",
                 "--tensor", "b=float16[N,K]", *sizes(M=8448, N=8448, K=8192),
                 "--config", "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,SK_BLOCK_K=64"]),
}
# commands run before a kernel's own (the Inductor output is made by torch.compile on the GPU that optimizes it)
PREPARE = {
    "inductor": ["{python}", str(WILD / "make_inductor_output.py"), "{out}/output_code.py", "--device", "cuda",
                 "--m", "8192", "--n", "8192", "--k", "8192", "--dtype", "float16"],
}


# --small: the same commands at sizes a CPU interprets in seconds (a smoke test of this script, tests/)
SMALL = {
    "t03": ["--size", "m=96", "--size", "n=64", "--size", "k=64", "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"],
    "t09": ["--size", "m=128", "--size", "n=96", "--size", "k=64", "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"],
    "t06": ["--size", "Z=1", "--size", "H=2", "--size", "S=128", "--size", "D=64", "--config", "BLOCK_M=64,BLOCK_N=32"],
    "vllm": ["--size", "M=128", "--size", "N=256", "--size", "K=128"],
    "torchao": ["--size", "M=128", "--size", "N=96", "--size", "K=64"],
    "inductor": [],
    "batch_invariant": ["--size", "M=128", "--size", "N=96", "--size", "K=64",
                        "--config", "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32"],
    "liger": ["--size", "M=96", "--size", "N=64", "--size", "K=128", "--size", "K4=32", "--autotune-config", "14"],
    "streamk": ["--size", "M=128", "--size", "N=96", "--size", "K=64", "--config", "BLOCK_M=32,BLOCK_N=32,BLOCK_K=32"],
}
# --small: the Inductor output is the one tests/wild keeps (made on a CPU), not made again
SMALL_KERNEL = {"inductor": str(WILD / "inductor_mm_output_code.py")}


def small(name: str, rest: list[str]) -> list[str]:
    """`rest` with its --size options replaced by SMALL's (and its --kernel by SMALL_KERNEL's)."""
    kept = [a for i, a in enumerate(rest) if a != "--size" and (i == 0 or rest[i - 1] != "--size")]
    if name in SMALL_KERNEL:
        kept = [SMALL_KERNEL[name] if i and kept[i - 1] == "--kernel" else a for i, a in enumerate(kept)]
    return kept + SMALL[name]


PHASES = {  # name -> a pattern of the line that ends it (its first number, if any, is that phase's own seconds)
    "autotuned": r"chosen by the kernel's @triton\.autotune on .* in ([\d.]+) s",
    "traced": r"^  trace .*traced in ([\d.]+) s",
    "baseline": r"^baseline \(kernel default site\)",
    "first_sweep": r"^search: first sweep .* in ([\d.]+) s",
    "stopped_or_done": r"^(?:best:|the kernel's own order|no order beat)",
}


def phases(timeline: list[list]) -> dict:
    """For each phase, when its line appeared (seconds since the command started) and the seconds the line
    itself states; None where it never appeared (killed before)."""
    out = {}
    for name, pattern in PHASES.items():
        hit = next(((t, re.search(pattern, line)) for t, line in timeline if re.search(pattern, line)), None)
        if hit is None:
            out[name] = None
            continue
        t, match = hit
        own = float(match.group(1)) if match.groups() else None
        out[name] = {"at_s": t, **({"own_s": own} if own is not None else {})}
    return out


def summary(out_dir: Path) -> dict:
    """What the optimizer's report.json says: whether the predictions told orders apart, the best order, its
    measured speedup and 95% CI against the kernel's own order."""
    path = out_dir / "report.json"
    if not path.is_file():
        return {"report": None}
    report = json.loads(path.read_text())
    iterations = [r for r in report["iterations"] if r.get("status") == "evaluated" and r.get("prediction")]
    dram = {r["prediction"]["dram_bytes"] for r in iterations}
    best = next((r for r in report["iterations"] if r["iteration"] == report["best"]["iteration"]), {})
    comparison = (best.get("measurement") or {}).get("comparison")
    return {
        "report": str(path.relative_to(out_dir.parent)),
        "device": report.get("device"),
        "occupancy": report.get("occupancy"), "occupancy_source": report.get("occupancy_source"),
        "evaluated_orders": len(iterations),
        # the run's own verdict over every order it simulated (report.json), else over the evaluated ones' bytes
        "prediction_separates_orders": report.get("prediction_separates_orders", len(dram) > 1),
        "separation": report.get("separation"),
        "best_order": {"label": best.get("label"), "formula": best.get("formula"),
                       "predicted": best.get("prediction")},
        "best_speedup": None if comparison is None else {
            "value": comparison["speedup"], "ci95": comparison["ci95"], "n_pairs": comparison.get("n_pairs"),
            "kind": f"measured ({report.get('device')})"},
        "summary": report["best"].get("summary"),
    }


def run_best_kernel(rest: list[str], folder: Path, timeout_s: float) -> dict | None:
    """The written best_kernel.py checked against the reference as the user would run it: `swizzlelab eval
    --kernel best_kernel.py[:KERNEL] ... --mode test` with the run's own inputs (exit code and its verdict line)."""
    best = folder / "best_kernel.py"
    if not best.is_file():
        return None
    at = rest.index("--kernel") + 1
    kernel = rest[at].split(":")[1:]
    argv = [*swizzlelab_command(), "eval", *rest[:at], ":".join([str(best), *kernel]), *rest[at + 1:], "--mode", "test"]
    code, wall, output, _ = run_command(argv, folder / "best_kernel_eval.log", timeout_s)
    verdict = [line for line in output.splitlines() if re.search(r"\b(pass|fail|error)", line, re.IGNORECASE)]
    return {"command": " ".join(["swizzlelab", *argv[len(swizzlelab_command()):]]), "rc": code,
            "wall_s": round(wall, 1), "verdict": verdict[-3:]}


def device_name() -> str:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-gpu"
    except Exception:  # noqa: BLE001 - recorded as unknown, the runs say the rest
        return "unknown"


# an order's line: raced ("iteration N (ORDER): ...; raced 1.09x [1.05, 1.12] over 8 rounds (WHY), measured (GPU)",
# then maybe "; confirmed alone: 1.01x [..] (VERDICT)"), or timed alone ("...; 1.01x [..] measured (GPU): VERDICT")
RACED = re.compile(r"^iteration (\d+) \((.+?)\): .*; raced ([\d.]+)x \[([\d.]+), ([\d.]+)\] over (\d+) rounds.*?, "
                   r"measured \((.+?)\)(?:; confirmed alone: ([\d.]+)x \[([\d.]+), ([\d.]+)\] \((.+)\))?$")
ALONE = re.compile(r"^iteration (\d+) \((.+?)\): .*; ([\d.]+)x \[([\d.]+), ([\d.]+)\] measured \((.+?)\): (\w[\w ]*)$")


def told(lines: list[str]) -> dict:
    """What the run's lines said: how it traced, how its measured search ended, each order it timed."""
    how = next((m.group(1) for m in map(re.compile(r"^  trace (.*)$").search, lines) if m), None)
    stop = next((line for line in lines if line.startswith(("measured search: ", "nothing measurable to gain"))), None)
    measured = [{"iteration": int(m[1]), "order": m[2], "raced": float(m[3]), "raced_ci95": [float(m[4]), float(m[5])],
                 "rounds": int(m[6]), "kind": f"measured ({m[7]})",
                 **({"alone": float(m[8]), "alone_ci95": [float(m[9]), float(m[10])], "verdict": m[11]} if m[8] else {})}
                for m in map(RACED.search, lines) if m]
    measured += [{"iteration": int(m[1]), "order": m[2], "speedup": float(m[3]), "ci95": [float(m[4]), float(m[5])],
                  "kind": f"measured ({m[6]})", "verdict": m[7]} for m in map(ALONE.search, lines) if m]
    return {"trace_how": how, "stop_reason": stop, "measured_orders": measured}


def merge(files: list[Path], out: Path) -> int:
    """One JSON of several calls' (the same device): their runs joined (the last call's row of a kernel run twice),
    each call's script line kept."""
    loaded = [json.loads(Path(f).read_text()) for f in files]
    devices = sorted({d["device"] for d in loaded})
    if len(devices) != 1:
        print(f"error: these files come from {len(devices)} devices ({', '.join(devices)}): merge one device's",
              file=sys.stderr)
        return 2
    runs: dict = {}
    for data, name in zip(loaded, files):
        for run in sorted(set(runs) & set(data["runs"])):  # a later call's run of a kernel replaces the earlier's
            print(f"{name}: its {run} replaces the earlier call's")
        # what told() reads, from the run's whole output where its folder is beside the JSON (OUT/<name>/cli.log),
        # else from the timeline (older calls cut lines at 240 characters, losing the measured intervals at their end)
        for run, row in data["runs"].items():
            log = Path(name).parent / run / "cli.log"
            lines = log.read_text(errors="replace").splitlines() if log.is_file() else \
                [line for _, line in row.get("timeline", [])]
            runs[run] = {**row, **told(lines)}
    result = {**loaded[0], "script": [d["script"] for d in loaded], "merged_from": [Path(f).name for f in files],
              "runs": {name: runs[name] for name in sorted(runs, key=lambda n: list(RUNS).index(n))}}
    out.write_text(json.dumps(result, indent=1, default=float))
    print(out)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="folder for the runs (not with --merge)")
    parser.add_argument("--timeout-s", type=float, default=540.0,
                        help="per kernel's command, then its process group is killed (rc 124)")
    parser.add_argument("--only", action="append", choices=sorted(RUNS), help="run only these (repeatable)")
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--time-budget", help="passed to optimize (e.g. 60s); default: optimize's own")
    parser.add_argument("--small", action="store_true", help="CPU-sized inputs (a smoke test of this script)")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these JSONs of single calls (with --out FILE)")
    parser.add_argument("--out", dest="merged", type=Path, help="the merged JSON (with --merge)")
    args = parser.parse_args(argv)
    if args.merge:
        if args.merged is None or args.out is not None:
            parser.error("--merge takes the JSON files and --out FILE, no OUT_DIR")
        return merge(args.merge, args.merged)
    if args.out is None:
        parser.error("give OUT_DIR (or --merge FILES --out FILE)")
    args.out.mkdir(parents=True, exist_ok=True)
    device = device_name()
    names = args.only or list(RUNS)
    rows = {}
    for name in names:
        what, rest = RUNS[name]
        if args.small:
            what, rest = what + " (--small: CPU-sized)", small(name, rest)
        folder = args.out / name
        folder.mkdir(exist_ok=True)
        rest = [a.replace("{out}", str(folder)) for a in rest]
        prepared = None
        if name in PREPARE and not args.small:
            argv_prepare = [a.replace("{out}", str(folder)).replace("{python}", sys.executable) for a in PREPARE[name]]
            code, wall, _, _ = run_command(argv_prepare, folder / "prepare.log", args.timeout_s)
            prepared = {"command": " ".join(argv_prepare), "rc": code, "wall_s": round(wall, 1)}
        typed = ["swizzlelab", "optimize", *rest, "--target", "auto", "--budget", str(args.budget),
                 *(["--time-budget", args.time_budget] if args.time_budget else []), "--out", str(folder)]
        code, wall, output, timeline = run_command(swizzlelab_command() + typed[1:], folder / "cli.log",
                                                   args.timeout_s)
        method = re.search(r"^trace method: (.*)$", output, re.MULTILINE)
        config = re.search(r"^constexprs/launch options: (.*)$", output, re.MULTILINE)
        error = re.search(r"^error: (.*)$", output, re.MULTILINE)
        rows[name] = {"what": what, "command": " ".join(typed), "rc": code, "timed_out": code == 124,
                      "timeout_s": args.timeout_s, "wall_s": round(wall, 1),
                      "trace_method": method.group(1) if method else None,
                      # the config every order ran at, and where it came from (the kernel's own autotuner on a GPU)
                      "config": config.group(1) if config else None,
                      "error": error.group(1) if error else None, **told(output.splitlines()), "phases": phases(timeline),
                      "timeline": timeline, **({"prepare": prepared} if prepared else {}),
                      **summary(folder)}
        rows[name]["best_kernel_run"] = run_best_kernel(rest, folder, args.timeout_s)
        print(json.dumps({name: {k: rows[name][k] for k in ("rc", "wall_s", "config", "trace_method", "phases",
                                                            "best_kernel_run")}}), flush=True)
        # written after each kernel: a call cut short keeps the kernels it finished
        slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
        result = {"study": "wild_gpu: published kernel files optimized on a GPU as typed (no environment variable)",
                  "device": device, "script": "python -m benchmarks.wild_gpu.run " + " ".join(argv),
                  "kind": f"measured ({device}) where a row says so; predictions are the simulator's", "runs": rows}
        path = args.out / f"wild_gpu_{slug}_{'-'.join(names)}{'_small' if args.small else ''}.json"
        path.write_text(json.dumps(result, indent=1, default=float))
    print(path)
    return 0 if all(r["rc"] == 0 for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
