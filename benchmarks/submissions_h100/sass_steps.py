"""Where ptxas put the softmax: the machine code of flash-attention CUDA variants, read without a GPU.

Builds the submission's CUDA source for the given variants with the local nvcc (sm_90a, the submission's flags, as a
cubin with `-Xptxas -v`), disassembles it with cuobjdump (PATH, or the copy Triton ships), and for every kernel
reports, in its key loop (the block from the loop's back branch target to the branch):
  * instructions by opcode and in all;
  * the instructions between `wgmma.wait_group 1` (SASS `WARPGROUP.DEPBAR.LE gsb0, 0x1`: the QK^T is done) and
    `wait_group 0` (`... 0x0`: the P V is done): the softmax runs under the consumer's own P V only if its MUFU.EX2s
    sit there;
  * the FMULs between the consumer's issue-turn barrier (BAR.SYNC) and its first HGMMA (work ahead of the QK^T);
plus ptxas's registers, spills and C75xx notes (wgmma serialized) per kernel.

Usage (repository root; nvcc needed, no GPU):
    python benchmarks/submissions_h100/sass_steps.py --variants 44,45,46,47,48,49 --out benchmarks/submissions_h100/sass_18.json
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from swizzlelab.io import atomic_write_text, load_module

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FLASH_SUB = ROOT / "examples/leaderboard/flash_attention/submission.py"
INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton

    return str(Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def analyse(body: str) -> dict:
    ins = [(int(m.group(1), 16), m.group(2)) for m in map(INSTR.match, body.splitlines()) if m]
    addr = [a for a, _ in ins]
    ops = [t for _, t in ins]
    out: dict = {"instructions": len(ops)}
    first_wait1 = next((i for i, t in enumerate(ops) if "DEPBAR.LE gsb0, 0x1" in t), None)
    if first_wait1 is None:
        return out
    # The key loop: the first backward branch after the first wait_group 1 whose target lies before it.
    end = next(k for k in range(first_wait1, len(ops))
               if (m := re.search(r"BRA (0x[0-9a-f]+)", ops[k])) and int(m.group(1), 16) < addr[first_wait1])
    start = addr.index(int(re.search(r"BRA (0x[0-9a-f]+)", ops[end]).group(1), 16))
    loop = ops[start:end + 1]
    out["loop_instructions"] = len(loop)
    out["loop_opcodes"] = dict(collections.Counter(map(opcode, loop)).most_common())
    w1 = next(i for i, t in enumerate(loop) if "DEPBAR.LE gsb0, 0x1" in t)
    w0 = next(i for i in range(w1, len(loop)) if "DEPBAR.LE gsb0, 0x0" in loop[i])
    between = loop[w1 + 1:w0]
    out["between_wait1_and_wait0"] = {"instructions": len(between),
                                      "MUFU": sum(opcode(t) == "MUFU" for t in between)}
    sync = next(i for i, t in enumerate(loop) if t.startswith("BAR.SYNC"))
    hg = next(i for i in range(sync, len(loop)) if opcode(loop[i]) == "HGMMA")
    out["fmul_between_turn_and_first_hgmma"] = sum(opcode(t) == "FMUL" for t in loop[sync:hg])
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    sub = load_module(FLASH_SUB, "leader_flash_attention_sass", str(FLASH_SUB))
    ids = [int(v) for v in args.variants.split(",")]
    source = sub.cuda_source({v: sub.CUDA_VARIANTS[v] for v in ids})
    flags = [f for f in sub.CUDA_BUILD_FLAGS if f not in ("-shared", "-Xcompiler", "-fPIC")]
    nvcc_version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "fa.cu", Path(tmp) / "fa.cubin"
        cu.write_text(source)
        build = subprocess.run(["nvcc", *flags, "-cubin", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                               capture_output=True, text=True, check=True)
        sass = subprocess.run([cuobjdump(), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    ptxas: dict[str, dict] = {}
    current = None
    for line in build.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = m.group(1)
            ptxas[current] = {"notes": []}
        elif current and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            ptxas[current].update(spill_stores=int(m.group(1)), spill_loads=int(m.group(2)))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            ptxas[current]["registers"] = int(m.group(1))
    for line in build.stderr.splitlines():
        if m := re.search(r"\((C75\d\d)\).*function '(\w+)'", line):
            ptxas.setdefault(m.group(2), {"notes": []})["notes"].append(m.group(1))
    # (stages, pingpong, pvmode, persistent, cluster, exp_h2, mode, keys) with cuda_source's defaults filled in.
    full = {v: tuple(sub.CUDA_VARIANTS[v]) + (1, 0, 0, 128)[len(sub.CUDA_VARIANTS[v]) - 4:] for v in ids}
    kernels = []
    for chunk in sass.split("Function : ")[1:]:
        name = chunk.split()[0]
        mode, bn = re.search(r"ELi(\d+)ELi(\d+)EEv", name).groups()
        variants = [v for v in ids if full[v][6] in (int(mode), int(mode) | 64) and full[v][7] == int(bn)]
        kernels.append({"kernel": name, "mode": int(mode), "keys": int(bn), "variants": variants,
                        "short_block_first": bool(int(mode) & 64), **ptxas.get(name, {}), **analyse(chunk)})
    # Compiled, never run: the machine is a CPU host, and the code is sm_90a machine code (an H100's).
    doc = {"command": "python benchmarks/submissions_h100/sass_steps.py " + " ".join(argv), "nvcc": nvcc_version,
           "system": f"compiled for sm_90a on a CPU host ({platform.machine()}, {platform.system()}); no GPU run",
           "flags": flags + ["-cubin", "-Xptxas", "-v"], "kernels": kernels}
    atomic_write_text(Path(args.out), json.dumps(doc, indent=2) + "\n")
    for k in kernels:
        between = k.get("between_wait1_and_wait0", {})
        print(f"v{k['variants']} mode {k['mode']:5d}{' short' if k['short_block_first'] else '      '}: "
              f"loop {k.get('loop_instructions')} instr, MUFU under own P V {between.get('MUFU')}, "
              f"FMUL before QK^T {k.get('fmul_between_turn_and_first_hgmma')}, spills "
              f"{k.get('spill_stores')}/{k.get('spill_loads')}, notes {k.get('notes')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
