"""Fit the time model on measured rows and report the held-out part: the plan's predictions (plan.py, CPU) joined
with a GPU run's measurements (collect.py), split by case (tasks with one case: by order), fitted on one part.

    python benchmarks/time_model/fit.py benchmarks/time_model/plan_h100.json ROWS.json [ROWS2.json ...] OUT.json
    python benchmarks/time_model/fit.py benchmarks/time_model/plan_h100.json --rows-from benchmarks/time_model/time_model_h100.json OUT.json

`--rows-from` refits from an earlier summary's rows (every measured figure is kept there). Each model variant in
VARIANTS is fitted on the fit rows; the calibration kept is the variant with the best leave-one-case-out Spearman
*within the fit rows* (the held-out rows choose nothing); every variant's held-out and leave-one-task-out figures are
reported. Control rows (collect.py --controls) and repeated orders (--repeat) are summarised, not fitted.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel, get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.swizzle.lang import parse_formula
from swizzlelab.sim.timemodel import MODEL_SPREAD, NOISE_FLOOR, Calibration, FitOptions, Row, TimeModel, Traffic, fit

# A measured speedup's own spread counts at least this much (log): the run's CI is not all of its noise.
LOG_SE_FLOOR = 0.004
CONTROL = "control:"  # collect.py's control orders: the kernel against itself, and its own order spliced
# Model variants, each fitted on the fit rows only. The first is the study's first fit (issue 43), kept for reference.
VARIANTS: dict[str, FitOptions] = {
    "first fit: CI weights, splice bias, efficiency <= 1.2": FitOptions(model_spread=0.0, splice=True,
                                                                        max_efficiency=1.2),
    "model-error weights, no splice bias, efficiency <= 1": FitOptions(),
}
# Where every fit starts (not the package's calibration: a refit must not depend on what the last one embedded).
START = Calibration("start", dram_efficiency=0.8, fabric_s_per_gb=0.0, overlap=2.0, occupancy_power=1.0,
                    sigma=MODEL_SPREAD, noise=NOISE_FLOOR, rows=0, source="")
# Rows whose simulated DRAM traffic changes less than this (log) carry no traffic signal for the model.
EQUAL_TRAFFIC = 0.01
RETEST_SDS = (0.005, 0.01, 0.02, 0.03)
# Integer instructions of a division or modulo by a value known only at run time (a 32-bit software division), and of
# any other operator; a formula's index cost is estimated from these.
RUNTIME_DIVISION_OPS = 20
# The sign figure also at fixed bands, so variants with different fitted noise bands compare on one footing.
COMMON_BANDS = (0.02, 0.03, 0.05)


@dataclass
class Measured:
    """One measured order of one case, joined with the plan's predictions of it and of the kernel's own order."""

    task: str
    key: str
    order: str
    device: str
    speedup: float
    ci95: list[float]
    base_ms: float
    plan_order: dict[str, Any]
    plan_base: dict[str, Any]
    registers: list[int] = field(default_factory=list)
    base_registers: list[int] = field(default_factory=list)
    occupancy: int | None = None
    base_occupancy: int | None = None
    repeats: list[float] = field(default_factory=list)  # every measured speedup of this order (collect --repeat)
    set: str = ""

    @property
    def log_se(self) -> float:
        low, high = self.ci95
        return max((math.log(high) - math.log(low)) / (2 * 1.96), LOG_SE_FLOOR) if low > 0 else 1.0

    def traffic(self, base: bool) -> Traffic:
        prediction = (self.plan_base if base else self.plan_order)["prediction"]
        return Traffic(dram_bytes=float(prediction["dram_read_bytes"] + prediction["dram_write_bytes"]),
                       fabric_bytes=float(prediction.get("fabric_bytes", 0)),
                       occupancy=self.base_occupancy if base else self.occupancy)

    @property
    def bytes_ratio(self) -> float:
        return self.traffic(True).dram_bytes / max(self.traffic(False).dram_bytes, 1.0)

    def row(self) -> Row:
        return Row(base=self.traffic(True), order=self.traffic(False), base_ms=self.base_ms, measured=self.speedup,
                   weight=1.0 / self.log_se ** 2)


def case_key(task: str, sizes: list[str], bench: int) -> str:
    return f"{task} bench:{bench} {' '.join(sizes)}".strip()


def _plan_index(plan: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    return {case_key(c["task"], c["sizes"], c["bench"]): (c, {o["order"]: o for o in c["orders"]})
            for c in plan["cases"]}


def _occupancy(resources: list[dict[str, Any]] | None) -> int | None:
    return min((r["blocks_per_sm"] for r in resources), default=None) if resources else None


def from_collect(plan: dict[str, Any], measured: dict[str, Any]) -> list[Measured]:
    """collect.py's rows (correct and timed ones) joined with the plan."""
    index = _plan_index(plan)
    by_case = {(c["task"], tuple(c["sizes"]), json.dumps(c["case"], sort_keys=True)): key
               for key, (c, _) in index.items()}
    out = []
    for row in measured["rows"]:
        if "speedup" not in row:
            continue
        key = by_case[(row["task"], tuple(row.get("sizes", [])), json.dumps(row["case"], sort_keys=True))]
        _, orders = index[key]
        own = orders["default"]
        order = own if row["order"].startswith(CONTROL) else orders[row["order"]]
        out.append(Measured(task=row["task"], key=key, order=row["order"], device=row.get("device", ""),
                            speedup=float(row["speedup"]), ci95=list(row["ci95"]), base_ms=float(row["base_ms"]),
                            plan_order=order, plan_base=own,
                            registers=[r["n_regs"] for r in row.get("resources") or []],
                            base_registers=[r["n_regs"] for r in row.get("base_resources") or []],
                            occupancy=_occupancy(row.get("resources")),
                            base_occupancy=_occupancy(row.get("base_resources"))))
    return out


def from_summary(plan: dict[str, Any], summary: dict[str, Any]) -> list[Measured]:
    """The measured rows of an earlier fit.py summary, joined with the plan again."""
    index = _plan_index(plan)
    out = []
    for row in summary["rows"]:
        if row["case"] not in index:
            raise UserError(f"{row['case']}: not a case of the plan; give the plan the rows were measured from")
        _, orders = index[row["case"]]
        if row["order"] not in orders:
            raise UserError(f"{row['case']} {row['order']}: not an order of the plan")
        out.append(Measured(task=row["task"], key=row["case"], order=row["order"], device=row.get("device") or "",
                            speedup=float(row["measured_speedup"]), ci95=list(row["measured_ci"]),
                            base_ms=float(row["base_ms"]), plan_order=orders[row["order"]],
                            plan_base=orders["default"], registers=list(row.get("registers", [])),
                            base_registers=list(row.get("base_registers", [])), occupancy=row.get("occupancy"),
                            base_occupancy=row.get("base_occupancy"),
                            repeats=list(row.get("repeats") or [float(row["measured_speedup"])])))
    return out


def merge_repeats(rows: list[Measured]) -> list[Measured]:
    """One row per (case, order): the geometric mean of its repeats, its CI the widest of theirs."""
    groups: dict[tuple[str, str], list[Measured]] = {}
    for row in rows:
        groups.setdefault((row.key, row.order), []).append(row)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) > 1:
            first.speedup = float(math.exp(np.mean([math.log(r.speedup) for r in group])))
            first.ci95 = [min(r.ci95[0] for r in group), max(r.ci95[1] for r in group)]
        first.repeats = [s for r in group for s in (r.repeats or [r.speedup])]
        out.append(first)
    return out


def assign_sets(rows: list[Measured]) -> None:
    """Whole cases alternate between fit and held out within a task; a task with one case alternates its orders."""
    cases_of: dict[str, list[str]] = {}
    for row in rows:
        keys = cases_of.setdefault(row.task, [])
        if row.key not in keys:
            keys.append(row.key)
    for task, keys in cases_of.items():
        mine = [r for r in rows if r.task == task]
        if len(keys) >= 2:
            for r in mine:
                r.set = "fit" if keys.index(r.key) % 2 == 0 else "held_out"
        else:
            for i, r in enumerate(sorted(mine, key=lambda r: r.order)):
                r.set = "fit" if i % 2 == 0 else "held_out"


def index_ops(text: str) -> int:
    """Integer instructions a formula costs each program (an estimate: operators, divisions by run-time values at
    RUNTIME_DIVISION_OPS; constant subexpressions fold away)."""
    constant: set[str] = set()
    total = 0

    def folds(node: ast.AST) -> bool:
        return all(isinstance(n, (ast.Constant, ast.operator, ast.unaryop, ast.BinOp, ast.UnaryOp, ast.Load))
                   or (isinstance(n, ast.Name) and n.id in constant) for n in ast.walk(node))

    for statement in parse_formula(text).statements:
        if folds(statement.expr):
            constant.add(statement.target)
            continue
        for node in ast.walk(statement.expr):
            if isinstance(node, ast.BinOp) and not folds(node):
                runtime = isinstance(node.op, (ast.FloorDiv, ast.Mod)) and not folds(node.right)
                total += RUNTIME_DIVISION_OPS if runtime else 1
            elif isinstance(node, (ast.Compare, ast.UnaryOp)) or (
                    isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("minimum", "maximum", "where")):
                total += 1
    return total


def residual_terms(rows: list[Measured], predicted: list[float], plan: dict[str, Any],
                   hw: HardwareModel) -> dict[str, Any]:
    """Whether a candidate term would explain what the model misses, read on the rows given (the fit rows): Spearman
    of log(measured / predicted) against each term's relative size (a term that slows an order correlates < 0)."""
    index = _plan_index(plan)
    residual = [math.log(r.speedup / p) for r, p in zip(rows, predicted)]
    terms: dict[str, list[float]] = {"index_ops": [], "far_l2_bytes": [], "registers": []}
    for r in rows:
        case, _ = index[r.key]
        # Programs per SM slot, one after another; a slot's index latency is hidden by the slot's neighbours.
        rounds = math.prod(case["grid"]) / (hw.n_units * case["occupancy"])
        ops = index_ops(r.plan_order["formula"]) - index_ops(r.plan_base["formula"])
        terms["index_ops"].append(ops * rounds / case["occupancy"] / r.base_ms)
        fabric = r.plan_order["prediction"].get("fabric_bytes", 0) - r.plan_base["prediction"].get("fabric_bytes", 0)
        terms["far_l2_bytes"].append(fabric / r.base_ms)
        terms["registers"].append(float(np.mean(r.registers or [0]) - np.mean(r.base_registers or [0])))
    out: dict[str, Any] = {}
    for name, values in terms.items():
        rho, p = spearmanr(values, residual) if len(set(values)) > 1 else (float("nan"), float("nan"))
        out[name] = {"spearman_with_residual": float(rho), "p_value": float(p)}
    out["what"] = ("index_ops: (order's - kernel's) estimated integer instructions x programs per slot / programs "
                   "per SM / base ms; far_l2_bytes: change of far-partition bytes / base ms; registers: change")
    return out


def verdict(predicted: float, measured: float, measured_ci: list[float], noise: float) -> bool:
    """The sign is right, or both are inside noise: the measured speedup within the model's noise band (or its
    CI holding 1), the predicted one within the band."""
    measured_noise = measured_ci[0] <= 1.0 <= measured_ci[1] or abs(math.log(measured)) <= noise
    predicted_noise = abs(math.log(predicted)) <= noise
    if measured_noise or predicted_noise:
        return measured_noise and predicted_noise
    return (predicted > 1.0) == (measured_ci[0] > 1.0)


def predictor(hw: HardwareModel, cal: Any, row: Measured) -> tuple[TimeModel, Any]:
    model = TimeModel(hw, cal, row.traffic(True), row.base_ms, anchor=f"anchored on measured {row.base_ms:.4g} ms")
    return model, model.predict(row.traffic(False))


def scores(predicted: list[float], rows: list[Measured], noise: float) -> dict[str, Any]:
    """Spearman (predicted, measured), the same for DRAM bytes alone, and the sign figures."""
    measured = [r.speedup for r in rows]
    enough = len(rows) >= 3 and len(set(predicted)) > 1
    return {"rows": len(rows), "tasks": sorted({r.task for r in rows}),
            "spearman": float(spearmanr(predicted, measured)[0]) if enough else float("nan"),
            "spearman_of_dram_bytes_alone": float(spearmanr([r.bytes_ratio for r in rows], measured)[0])
            if len(rows) >= 3 else float("nan"),
            "sign_right_or_both_noise": float(np.mean([verdict(p, r.speedup, r.ci95, noise)
                                                       for p, r in zip(predicted, rows)])) if rows else float("nan"),
            "sign_right_strict_ci": float(np.mean([verdict(p, r.speedup, r.ci95, 0.0)
                                                   for p, r in zip(predicted, rows)])) if rows else float("nan"),
            "sign_right_or_both_within_band": {
                f"{band:.2f}": float(np.mean([verdict(p, r.speedup, r.ci95, band) for p, r in zip(predicted, rows)]))
                for band in COMMON_BANDS} if rows else {}}


def cross_validated(hw: HardwareModel, rows: list[Measured], options: FitOptions, group: str) -> dict[str, Any]:
    """Leave one group (case or task) out: fit on the others, predict it; scores over every row's prediction, each
    sign judged against the noise band of the fit that predicted it."""
    predicted, ordered, right = [], [], []
    for name in sorted({getattr(r, group) for r in rows}):
        train = [r.row() for r in rows if getattr(r, group) != name]
        cal = fit(hw, train, START, options=options)
        for r in rows:
            if getattr(r, group) == name:
                speedup = predictor(hw, cal, r)[1].speedup
                predicted.append(speedup)
                ordered.append(r)
                right.append(verdict(speedup, r.speedup, r.ci95, cal.noise))
    out = scores(predicted, ordered, 0.0)
    out["sign_right_or_both_noise"] = float(np.mean(right)) if right else float("nan")
    out["left_out"] = group
    return out


def ceilings(rows: list[Measured], noise: float, seed: int = 0) -> dict[str, Any]:
    """What no model could beat on these rows: Spearman of predictors that know the measured speedups except where
    noted. The measured speedups stand in for the true ones (each carries its own noise, so these are upper bounds)."""
    if len(rows) < 3:
        return {}
    truth = np.log([r.speedup for r in rows])
    equal = np.abs(np.log([r.bytes_ratio for r in rows])) < EQUAL_TRAFFIC

    def rho(pred: np.ndarray) -> float:
        return float(spearmanr(pred, truth)[0])

    rng = np.random.default_rng(seed)
    retest = {f"{sd:.3f}": float(np.mean([rho(truth + rng.normal(0.0, sd, truth.size)) for _ in range(2000)]))
              for sd in RETEST_SDS}
    bands = {f"{band:.3f}": rho(np.where(np.abs(truth) > band, truth, 0.0)) for band in (0.01, 0.02, 0.03, noise)}
    best_constant = max((rho(np.where(equal, c, truth)), float(math.exp(c))) for c in np.linspace(-0.1, 0.1, 201))
    return {
        "rows": len(rows),
        "rows_with_equal_traffic": int(equal.sum()),
        "rows_measured_within_band": {f"{b:.3f}": int((np.abs(truth) <= b).sum()) for b in (0.01, 0.02, noise)},
        "traffic_blind_1.0": rho(np.where(equal, 0.0, truth)),
        "traffic_blind_best_constant": {"spearman": best_constant[0], "constant": best_constant[1]},
        "blind_inside_band": bands,
        "one_remeasurement_with_log_sd": retest,
        "what": "Spearman(predictor, measured) on these rows for: traffic_blind_*: exact wherever the simulated "
                "traffic changes, one constant (1.0, or the best one for these rows) where it does not; "
                "blind_inside_band: exact outside +-band, 1.0 inside; one_remeasurement: the measured speedups "
                "themselves against a remeasurement with that log spread (a perfect model under that noise)",
    }


def controls_summary(rows: list[Measured]) -> dict[str, Any]:
    """The kernel timed against itself (and against its own order spliced): what a null change measures."""
    out: dict[str, Any] = {}
    for name in sorted({r.order for r in rows}):
        mine = [r for r in rows if r.order == name]
        logs = np.log([s for r in mine for s in (r.repeats or [r.speedup])])
        out[name] = {"rows": [{"case": r.key, "speedup": r.speedup, "ci95": r.ci95} for r in mine],
                     "log_sd": float(np.std(logs)) if logs.size > 1 else None,
                     "max_abs_log": float(np.max(np.abs(logs))) if logs.size else None,
                     "ci_excludes_1": sum(not (r.ci95[0] <= 1.0 <= r.ci95[1]) for r in mine)}
    return out


def retest_summary(rows: list[Measured]) -> dict[str, Any]:
    """The spread of an order's repeated measurements (collect --repeat)."""
    spreads = [float(np.std(np.log(r.repeats), ddof=1)) for r in rows if len(r.repeats) > 1]
    return {"orders_repeated": len(spreads), "median_log_sd": float(np.median(spreads)) if spreads else None,
            "max_log_sd": float(np.max(spreads)) if spreads else None}


def variant_report(hw: HardwareModel, rows: list[Measured], options: FitOptions, source: str) -> dict[str, Any]:
    fit_rows = [r for r in rows if r.set == "fit"]
    cal = fit(hw, [r.row() for r in fit_rows], START, source=source, options=options)
    report: dict[str, Any] = {"options": asdict(options), "calibration": asdict(cal)}
    for name in ("fit", "held_out"):
        part = [r for r in rows if r.set == name]
        report[name] = scores([predictor(hw, cal, r)[1].speedup for r in part], part, cal.noise)
    report["fit_leave_one_case_out"] = cross_validated(hw, fit_rows, options, "key")
    report["all_leave_one_task_out"] = cross_validated(hw, rows, options, "task")
    return report


def out_row(hw: HardwareModel, cal: Any, r: Measured) -> dict[str, Any]:
    model, pred = predictor(hw, cal, r)
    return {"task": r.task, "case": r.key, "order": r.order, "device": r.device, "set": r.set,
            "predicted_speedup": pred.speedup, "predicted_ci": [pred.low, pred.high], "measured_speedup": r.speedup,
            "measured_ci": r.ci95, "repeats": r.repeats, "base_ms": r.base_ms, "bound": model.bound(),
            "bytes_ratio": r.bytes_ratio, "registers": r.registers, "base_registers": r.base_registers,
            "occupancy": r.occupancy, "base_occupancy": r.base_occupancy,
            "sign_right_or_both_noise": verdict(pred.speedup, r.speedup, r.ci95, cal.noise),
            "sign_right_strict": verdict(pred.speedup, r.speedup, r.ci95, 0.0)}


def load(args: argparse.Namespace, plan: dict[str, Any]) -> tuple[list[Measured], list[str]]:
    rows: list[Measured] = []
    devices: list[str] = []
    if args.rows_from:
        summary = json.loads(args.rows_from.read_text())
        devices += list(summary.get("device", []))
        rows += from_summary(plan, summary)
    for path in args.rows:
        measured = json.loads(path.read_text())
        devices.append(measured["device"])
        rows += from_collect(plan, measured)
    if not rows:
        raise UserError("no measured rows: give collect.py's rows files or --rows-from an earlier summary")
    return rows, sorted(set(devices))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("files", type=Path, nargs="+", help="collect.py's rows files, then the output")
    parser.add_argument("--rows-from", type=Path, help="an earlier summary (fit.py's output) whose rows to refit")
    args = parser.parse_args(argv)
    *args.rows, out = args.files
    plan = json.loads(args.plan.read_text())
    hw = get_model(plan["target"])
    everything, devices = load(args, plan)
    controls = merge_repeats([r for r in everything if r.order.startswith(CONTROL)])
    rows = merge_repeats([r for r in everything if not r.order.startswith(CONTROL)])
    assign_sets(rows)
    source = f"benchmarks/time_model/{out.name}"
    variants = {name: variant_report(hw, rows, options, source) for name, options in VARIANTS.items()}
    # The rule that keeps a calibration reads the fit rows only.
    kept = max(variants, key=lambda n: variants[n]["fit_leave_one_case_out"]["spearman"])
    cal = fit(hw, [r.row() for r in rows if r.set == "fit"], START, source=source, options=VARIANTS[kept])
    out_rows = [out_row(hw, cal, r) for r in rows]
    summary = {name: variants[kept][name] for name in ("fit", "held_out", "fit_leave_one_case_out",
                                                       "all_leave_one_task_out")}
    result = {"script": "benchmarks/time_model/fit.py (collect.py measured, plan.py predicted)",
              "command": "python benchmarks/time_model/fit.py " + " ".join(argv), "device": devices,
              "measured": "measured (" + ", ".join(devices) + "): interleaved A/B, 95% CI",
              "predicted": f"predicted (time model {hw.name} over the simulator's traffic)",
              "kept_variant": kept, "kept_by": "the best leave-one-case-out Spearman within the fit rows",
              "calibration": asdict(cal), "summary": summary, "variants": variants,
              "ceilings_held_out": ceilings([r for r in rows if r.set == "held_out"], cal.noise),
              "ceilings_fit": ceilings([r for r in rows if r.set == "fit"], cal.noise),
              "residual_terms_fit": residual_terms(
                  [r for r in rows if r.set == "fit"],
                  [predictor(hw, cal, r)[1].speedup for r in rows if r.set == "fit"], plan, hw),
              "controls": controls_summary(controls), "retest": retest_summary(rows), "rows": out_rows,
              "targets": {"held_out_spearman": 0.7, "held_out_sign_right_or_both_noise": 0.85, "rows": 60, "tasks": 6}}
    atomic_write_text(out, json.dumps(result, indent=1, default=float) + "\n")
    print(json.dumps({"measured": result["measured"], "predicted": result["predicted"], "kept_variant": kept, "calibration": asdict(cal), "summary": summary,
                      "variants": {n: {k: v[k] for k in ("held_out", "fit_leave_one_case_out",
                                                         "all_leave_one_task_out")} for n, v in variants.items()}},
                     indent=1, default=float))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
