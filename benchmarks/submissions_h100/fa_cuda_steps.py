"""Step 3 of the flash-attention work log on one GPU: builds the sm_90a CUDA kernel's variants, checks each on
small shapes in a child process (a hung or crashing kernel cannot stop the sweep), then times the ones that
agree with the fp32 reference next to cuDNN and the best Triton kernel.

Usage (repository root, CUDA machine): python -m benchmarks.submissions_h100.fa_cuda_steps --out DIR [--name steps_3.json]
    [--paired BASE --paired-budget-s 3]: also time each variant against BASE interleaved (A B A B ..., L2 flushed
    before each call), whose paired ratio cancels the card's clock drift that separates rows timed one after another.
    Only the variants named by --time (default: every one that passed) are paired.
    [--profile-best]: after the paired runs, also profile (ncu) the variant with the highest paired speedup.
    [--self-check]: also run the submission's own first-call self-check (cuda_self_check) on every variant that
    passed the child checks, in this process, and record it (what decides the submission's pick in a leader run).
Exit status 0 only when every variant ran without hanging or crashing (the submission self-checks every
variant at its first call, so a hanging one must not reach it) and the fastest correct one beats both
--target-ms and cuDNN in this run; a shell chain then goes on to the leader run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.lab import child_env, module_command
from benchmarks.lab import submissions as run  # inputs, timing, profiling, environment (selects Triton's backend)

import torch  # noqa: E402

from swizzlelab.harness.timing import TimingOptions, compare_interleaved  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402

# The last has 256 query tiles: persistent CTAs (132 on an H100) walk two, so the step between tiles is checked.
SMALL_CASES = ((1, 2, 128), (2, 3, 384), (2, 2, 256), (1, 4, 1024), (1, 16, 2048))


def child_check(variants: list[int], build: tuple[int, ...] | None) -> int:
    """Small seeded shapes against an fp32 reference, variant by variant; one START and one CHECK line each.
    `build`: the parent's variant set (the same source, so the child loads the library the parent built; None:
    every variant)."""
    sub = run.load_submission(run.FLASH_SUB)
    sub.BUILD_VARIANTS = build or tuple(sub.CUDA_VARIANTS)
    for variant in variants:
        print(f"START {variant}", flush=True)
        res: dict = {"variant": variant, "cases": []}
        for batch, heads, seq in SMALL_CASES:
            gen = torch.Generator(device="cuda").manual_seed(seq + heads)
            shape = (batch, heads, seq, 128)
            q, k, v = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float16) for _ in range(3))
            out = torch.full(shape, float("nan"), device="cuda", dtype=torch.float16)
            try:
                sub.flash_attention_cuda(q, k, v, out, 128 ** -0.5, variant)
                torch.cuda.synchronize()
            except RuntimeError as err:
                res["error"] = str(err)[:300]
                break
            ref = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * 128 ** -0.5, dim=-1) @ v.float()
            diff = (out.float() - ref).abs()
            res["cases"].append({"shape": list(shape), "max_abs_err": float(diff.nan_to_num(1e9).max()),
                                 "nan": int(out.isnan().sum())})
        res["ok"] = "error" not in res and all(c["max_abs_err"] < 2e-2 and c["nan"] == 0 for c in res["cases"])
        print("CHECK " + json.dumps(res), flush=True)
    return 0


def checks_in_children(variants: list[int]) -> list[dict]:  # the parent's BUILD_VARIANTS = variants
    """Run child_check over the variants; a hang or crash marks the variant that started it and the rest go on
    in a fresh child."""
    results: list[dict] = []
    remaining = list(variants)
    while remaining:
        try:
            proc = subprocess.run(module_command("benchmarks.submissions_h100.fa_cuda_steps", "--check",
                                                 ",".join(map(str, remaining)), "--variants", ",".join(map(str, variants))),
                                  capture_output=True, text=True, timeout=40 + 6 * len(remaining), env=child_env())
            stdout, stderr, why = proc.stdout, proc.stderr, f"exit {proc.returncode}"
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            why = "timeout (hang)"
        started = None
        for line in stdout.splitlines():
            if line.startswith("START "):
                started = int(line.split()[1])
            elif line.startswith("CHECK "):
                res = json.loads(line[6:])
                results.append(res)
                remaining.remove(res["variant"])
                started = None
        if started is not None:
            results.append({"variant": started, "ok": False, "crash": f"{why}: {stderr[-600:]}"})
            remaining.remove(started)
        elif remaining and not any(line.startswith("START ") for line in stdout.splitlines()):
            for vid in remaining:
                results.append({"variant": vid, "ok": False, "crash": f"child failed before any check ({why}): "
                                                                      f"{stderr[-600:]}"})
            remaining = []
    return results


def paired_rows(base: int, others: list[int], variants: dict, inputs: Any, budget_s: float, rows: list[dict],
                save: Any) -> None:
    """Each variant against `base`, interleaved: speedup = base mean / variant mean (> 1: the variant is faster);
    appended to `rows` and saved one by one."""
    case, data, ref = inputs.get("flash_attention")
    check = run.checker("flash_attention", ref)
    for vid in others:
        a, b = f"fa.cuda_v{base}", f"fa.cuda_v{vid}"
        comp = compare_interleaved(variants[a], variants[b], data, budget_s=budget_s, check_a=check, check_b=check,
                                   options=TimingOptions(sample_clock=True))
        rows.append({"base": a, "variant": b, "case": case, "speedup": comp.speedup,
                     "ci95": [comp.ci_low, comp.ci_high], "method": comp.method, "base_mean_ms": comp.a.mean_ms,
                     "variant_mean_ms": comp.b.mean_ms, "n": comp.a.n, "gpu_clock": comp.a.gpu_clock,
                     "check": [comp.a.check_after, comp.b.check_after]})
        print(f"paired {b} vs {a}: {comp.a.mean_ms:.4f} -> {comp.b.mean_ms:.4f} ms, speedup {comp.speedup:.4f} "
              f"[{comp.ci_low:.4f}, {comp.ci_high:.4f}] (n={comp.a.n})", flush=True)
        save()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--name", default="steps_3.json")
    parser.add_argument("--budget-s", type=float, default=1.0)
    parser.add_argument("--check")
    parser.add_argument("--target-ms", type=float, default=13.0)
    parser.add_argument("--time", default="", help="variant ids to time (default: every one that passed)")
    parser.add_argument("--profile", default="", help="variant names to profile with ncu after timing")
    parser.add_argument("--paired", type=int, default=None, help="variant id every timed variant is compared with")
    parser.add_argument("--paired-budget-s", type=float, default=3.0)
    parser.add_argument("--profile-best", action="store_true", help="profile the best paired variant too")
    parser.add_argument("--self-check", action="store_true", help="record the submission's cuda_self_check")
    parser.add_argument("--variants", default="", help="variant ids to build and check (default: all)")
    args = parser.parse_args(argv)
    requested = tuple(int(v) for v in args.variants.split(",")) if args.variants else None
    if args.check is not None:
        return child_check([int(v) for v in args.check.split(",")], requested)
    out_dir = Path(args.out)
    doc: dict = {**run.environment(["fa_cuda_steps"] + argv), "kind": "steps", "rows": [], "profiles": [],
                 "checks": []}
    doc["command"] = "python -m benchmarks.submissions_h100.fa_cuda_steps " + " ".join(argv)

    def save() -> None:
        atomic_write_text(out_dir / args.name, json.dumps(doc, indent=2, default=str) + "\n")

    sub = run.load_submission(run.FLASH_SUB)
    # Building and checking only the variants of this step keeps a step call short (all 34 take minutes to build).
    sub.BUILD_VARIANTS = requested or tuple(sub.CUDA_VARIANTS)
    started = time.perf_counter()
    module = sub._cuda_module()
    doc["build"] = {"seconds": time.perf_counter() - started, "error": sub._cuda_state.get("error"),
                    "warnings": sub._cuda_state.get("warnings"), "flags": sub.CUDA_BUILD_FLAGS}
    print(f"build {doc['build']}", flush=True)
    save()
    if module is None:
        return 3
    doc["checks"] = checks_in_children(list(sub.BUILD_VARIANTS))
    for res in doc["checks"]:
        print(f"check v{res['variant']} {sub.CUDA_VARIANTS[res['variant']]}: {json.dumps(res)[:500]}", flush=True)
    save()
    fatal = any("crash" in res for res in doc["checks"])
    if fatal:
        # The submission self-checks its CUDA_PREFERENCE variants in-process at its first call: a hanging or
        # crashing one must not reach it in the leader run that may follow, so it is dropped from that line
        # here (recorded in the JSON; the committed submission gets the same edit).
        bad = {res["variant"] for res in doc["checks"] if "crash" in res}
        keep = tuple(v for v in sub.CUDA_PREFERENCE if v not in bad)
        text = run.FLASH_SUB.read_text()
        line = f"CUDA_PREFERENCE = {tuple(sub.CUDA_PREFERENCE)!r}"
        if line in text:
            atomic_write_text(run.FLASH_SUB, text.replace(line, f"CUDA_PREFERENCE = {keep!r}"))
            doc["submission_edit"] = {"dropped": sorted(bad), "CUDA_PREFERENCE": list(keep)}
            print(f"submission: dropped crashing variants {sorted(bad)} from CUDA_PREFERENCE", flush=True)
    passed = [res["variant"] for res in doc["checks"] if res["ok"]]
    if args.self_check:
        # In-process: only variants that already ran clean in a child (a hang there would stop this process).
        doc["self_checks"] = {str(v): sub.cuda_self_check(v, torch.device("cuda")) or "ok" for v in passed}
        print(f"self-check {doc['self_checks']}", flush=True)
        save()
    variants = run.all_variants(sub.BUILD_VARIANTS)  # the same source: the library built above is reused
    inputs = run.Inputs()
    wanted = [int(v) for v in args.time.split(",")] if args.time else passed
    names = [f"fa.cuda_v{v}" for v in wanted if v in passed] + ["fa.baseline_cudnn", "fa.desc_m128_n64_s2_r128"]
    for n in names:
        doc["rows"].append(run.time_variant(n, variants[n], inputs, args.budget_s))
        save()
    if args.paired is not None:
        doc["paired"] = []
        paired_rows(args.paired, [v for v in wanted if v in passed and v != args.paired], variants, inputs,
                    args.paired_budget_s, doc["paired"], save)
    inputs.cache.clear()
    torch.cuda.empty_cache()
    profile = [n for n in args.profile.split(",") if n] if args.profile else []
    if args.profile_best and doc.get("paired"):
        best_row = max(doc["paired"], key=lambda r: r["speedup"])
        if best_row["variant"] not in profile:
            profile.append(best_row["variant"])
    for name in profile:
        doc["profiles"].append(run.profile_variant(name, out_dir))
        save()
    timed = {r["name"]: r["mean_ms"] for r in doc["rows"] if "mean_ms" in r}
    cuda = [v for n, v in timed.items() if n.startswith("fa.cuda")]
    best = min(cuda) if cuda else float("inf")
    doc["verdict"] = {"best_cuda_ms": best, "cudnn_ms": timed.get("fa.baseline_cudnn"), "target_ms": args.target_ms,
                      "fatal": fatal}
    save()
    print(f"verdict {doc['verdict']}", flush=True)
    # 0: every variant ran without hanging or crashing and the best beats both the target and cuDNN.
    return 0 if not fatal and best < min(args.target_ms, timed.get("fa.baseline_cudnn", 0.0)) else 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
