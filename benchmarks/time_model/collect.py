"""Measure, on the local GPU, every order of a time-model plan against its kernel's own order: correctness, then
interleaved A/B timing (95% CI), and what the compiler gave each order's kernel (registers, occupancy).

    python benchmarks/time_model/collect.py benchmarks/time_model/plan_h100.json $OUT/rows_h100.json --budget-s 1.0 --deadline-s 500

Rows are written after every order (a run cut short keeps what it measured); orders are taken one per case in
turn, so a deadline leaves every task measured. --controls adds, first in each case, the kernel timed against
itself (what a null change measures) and against its own order spliced in as a formula (what splicing alone
costs); --repeat N measures every order N times, each pass after all orders of the one before.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from swizzlelab import harness
from swizzlelab.harness.resources import compiled_resources
from swizzlelab.io import atomic_write_text
from swizzlelab.scenario import load_scenario
from swizzlelab.swizzle import apply_swizzle


# Control orders (fit.py summarises them apart): the kernel's own launcher as B, and its own order spliced in.
SAME_KERNEL = "control:same-kernel"
OWN_ORDER_SPLICED = "control:own-order-spliced"


def todo_orders(record: dict[str, Any], controls: bool = False, repeat: int = 1) -> list[dict[str, Any]]:
    """The orders a case measures, in turn: controls first (the kernel's own permutation), then the plan's orders;
    the whole list `repeat` times, each entry marked with its pass."""
    own = next(o for o in record["orders"] if o["order"] == "default")
    first = [{**own, "order": name} for name in (SAME_KERNEL, OWN_ORDER_SPLICED)] if controls else []
    orders = first + [o for o in record["orders"] if o["order"] != "default"]
    return [{**o, "pass": k} for k in range(max(repeat, 1)) for o in orders]


class Case:
    """One case of the plan on this GPU: its scenario, inputs and the kernel's own order as the A side."""

    def __init__(self, record: dict[str, Any], controls: bool = False, repeat: int = 1):
        self.record = record
        sizes = list(record["sizes"])
        self.scenario = load_scenario(record["task"], f"bench:{record['bench']}", sizes, "auto")
        self.task = self.scenario.task
        self.case = self.scenario.case
        self.data = self.task.generate_input(self.case)
        self.todo = todo_orders(record, controls, repeat)
        self.base = self.launcher(None)
        self.base_resources: list[dict[str, Any]] = []

    def launcher(self, formula: Any) -> Any:
        return lambda data: self.task.custom_kernel(data, formula)

    def resources(self, formula: Any) -> list[dict[str, Any]]:
        jit_fn = self.scenario.kernel.jit_fn
        return compiled_resources(apply_swizzle(jit_fn, formula) if formula is not None else jit_fn)


def measure(case: Case, order: dict[str, Any], budget_s: float) -> dict[str, Any]:
    scenario, task = case.scenario, case.task
    name = order["order"]
    formula = (None if name == SAME_KERNEL else scenario.default_order() if name == OWN_ORDER_SPLICED
               else scenario.parse_order(name))
    row: dict[str, Any] = {"task": task.name, "case": case.case, "sizes": case.record["sizes"], "order": name,
                           "permutation_id": order["permutation_id"], "pass": order.get("pass", 0)}
    started = time.perf_counter()
    check = harness.check_correctness(task, case.launcher(formula), case.case, recheck=False)
    row["correct"] = bool(check.passed)
    if not check.passed:
        row["error"] = check.message
        return row
    comparison = harness.compare_interleaved(case.base, case.launcher(formula), case.data, budget_s=budget_s,
                                             check_a=lambda out: task.check(case.data, out),
                                             check_b=lambda out: task.check(case.data, out))
    row.update(speedup=comparison.speedup, ci95=[comparison.ci_low, comparison.ci_high], base_ms=comparison.a.mean_ms,
               order_ms=comparison.b.mean_ms, n=comparison.a.n, device=comparison.a.device,
               resources=case.resources(formula), base_resources=case.resources(None),
               seconds=time.perf_counter() - started)
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget per order")
    parser.add_argument("--deadline-s", type=float, default=500.0)
    parser.add_argument("--only", default="", help="comma-separated task names")
    parser.add_argument("--controls", action="store_true", help="also time the kernel against itself and against "
                        "its own order spliced in")
    parser.add_argument("--repeat", type=int, default=1, help="measure every order this many times")
    args = parser.parse_args(argv)
    started = time.monotonic()
    plan = json.loads(args.plan.read_text())
    import torch

    result: dict[str, Any] = {"script": "benchmarks/time_model/collect.py", "command": "python " + " ".join(sys.argv),
                              "device": torch.cuda.get_device_name(0), "plan": str(args.plan), "rows": [],
                              "errors": []}
    cases: list[Case] = []
    for record in plan["cases"]:
        if args.only and record["task"] not in args.only.split(","):
            continue
        try:
            cases.append(Case(record, args.controls, args.repeat))
        except Exception as err:  # a case that cannot run here is reported, the others go on
            result["errors"].append(f"{record['task']} {record['sizes']}: {type(err).__name__}: {err}")
    while any(c.todo for c in cases) and time.monotonic() - started < args.deadline_s:
        for case in cases:
            if not case.todo or time.monotonic() - started >= args.deadline_s:
                continue
            order = case.todo.pop(0)
            try:
                row = measure(case, order, args.budget_s)
            except Exception as err:
                traceback.print_exc()
                row = {"task": case.task.name, "case": case.case, "order": order["order"],
                       "error": f"{type(err).__name__}: {err}"}
            result["rows"].append(row)
            print(f"{row['task']:16s} {str(row.get('case', ''))[:60]:60s} {row['order']:30s} "
                  f"{row.get('speedup', float('nan')):.4f} {row.get('ci95', '')} {row.get('error', '')}", flush=True)
            result["elapsed_s"] = time.monotonic() - started
            atomic_write_text(args.out, json.dumps(result, indent=1, default=str))
    result["unmeasured"] = [f"{c.task.name} {c.record['sizes']} {o['order']}" for c in cases for o in c.todo]
    atomic_write_text(args.out, json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
