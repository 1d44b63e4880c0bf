"""The validation study's summary.json, built from its raw files (raw.manifest.json): the table's headline figures and
what check_results.py asks of the table, the rows files, the placement probe, the page/pace/replicate tests and floors.

    python benchmarks/archive.py summarize sim_validation     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path

TABLE = "sim_validation.json"
PLACEMENT_PROBES = {"h100": "placement_probe_h100.json", "h200": "placement_probe_h200.json"}
RULE_TESTS = ("page/page_test.json", "page/page_test_h100.json", "pace/pace_test.json")
FLOORS = ("ncu_floor.json", "ncu_floor_deep.json")
DEEP = "deep"


def number(value: object) -> bool:
    """A real number (bool is not one), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def row_problems(row: dict) -> list[str]:
    """The row schema issue 15 names for the validation JSON: task/order/device strings, case a dict, set fit or
    held_out, hit rates in [0, 100] pp and DRAM read bytes >= 0."""
    problems = []
    for key in ("task", "order", "device"):
        if not (isinstance(row.get(key), str) and row[key]):
            problems.append(f"{key} is {row.get(key)!r}, not a non-empty string")
    if not (isinstance(row.get("case"), dict) and row["case"]):
        problems.append(f"case is {row.get('case')!r}, not a non-empty object")
    if row.get("set") not in ("fit", "held_out"):
        problems.append(f"set is {row.get('set')!r}, not fit / held_out")
    for key in ("predicted_l2_hit_pct", "measured_l2_hit_pct"):
        if not (number(row.get(key)) and 0.0 <= row[key] <= 100.0):
            problems.append(f"{key} is {row.get(key)!r}, not a percentage")
    for key in ("predicted_dram_read_bytes", "measured_dram_read_bytes"):
        if not (number(row.get(key)) and row[key] >= 0):
            problems.append(f"{key} is {row.get(key)!r}, not a byte count")
    return problems


def case_name(row: dict) -> str:
    """A row's case as validate.case_key names it (kept here so that the summary needs no numba)."""
    return " ".join([row["task"]] + [f"{k}={v}" for k, v in row["case"].items() if k != "seed"])


def table_runs(rows: list[dict], less: dict[str, int] | None = None) -> dict[str, list[int]]:
    """Runs a row of each table case ("part | device | case", as ncu_reproducibility names it) holds, less the runs
    `less` counts per "device | case | order"."""
    runs: dict[str, set[int]] = {}
    for r in rows:
        case = case_name(r)
        n = len(r["measured_dram_read_bytes_runs"]) - (less or {}).get(f"{r['device']} | {case} | {r['order']}", 0)
        runs.setdefault(f"{r['set']} | {r['device']} | {case}", set()).add(n)
    return {k: sorted(v) for k, v in sorted(runs.items())}


def group_figures(group: dict) -> dict:
    """A fit / held_out group's figures, without its per-case tables."""
    return {k: v for k, v in group.items() if k not in ("cases", "rank_agreement_by_predicted_gap")}


def table_summary(table: dict) -> dict:
    rows = table["rows"]
    problems = [f"row {i}: {p}" for i, r in enumerate(rows) for p in row_problems(r)][:10]
    good = [r for r in rows if not row_problems(r)]
    spread: dict[str, dict[str, list[float]]] = {}
    for r in good:
        key = r["task"] + json.dumps(r["case"], sort_keys=True)
        spread.setdefault(r["device"], {}).setdefault(key, []).append(r["measured_l2_hit_pct"])
    page_noise: dict[str, set[str]] = {}
    for r in rows:
        said = [part.strip() for part in r["predicted_by"].replace(")", ",").split(",") if "page_noise" in part]
        page_noise.setdefault(r["device"], set()).add(said[0] if said else "none")
    anchors = [r for r in rows if r["task"] == "matmul" and r["order"] == "row_major"
               and r["case"]["m"] == r["case"]["n"] == r["case"]["k"] == 4096]
    return {
        "command_inputs": [w for w in table["command"].split() if w.endswith(".json")][1:],
        "targets": table["targets"],
        "fitted": {k: v for k, v in table.items() if k.startswith("fitted_")},
        "progress_model": table["progress_model"],
        "fit": {name: group_figures(g) for name, g in table["fit"].items()},
        "held_out": {name: group_figures(g) for name, g in table["held_out"].items()} if "held_out" in table else None,
        "rows": len(rows),
        "row_problems": problems,
        "well_formed_rows": {d: sum(len(v) for v in cases.values()) for d, cases in sorted(spread.items())},
        "case_spread_pp": {d: {k: max(v) - min(v) for k, v in sorted(cases.items())} for d, cases in sorted(spread.items())},
        "sets": sorted({r["set"] for r in good}),
        "all_output_correct": all(r.get("output_correct") for r in rows),
        "page_noise_by_device": {d: sorted(v) for d, v in sorted(page_noise.items())},
        "anchor_rows": [{k: r[k] for k in ("task", "case", "order", "device", "occupancy", "predicted_l2_hit_pct",
                                            "predicted_dram_read_bytes")} for r in anchors],
        "case_runs": table_runs(rows),
    }


def rows_file_summary(doc: dict) -> dict:
    """What a run.py rows file says of itself: its GPU, failures, rows and how many outputs were checked right."""
    return {"device": doc["device"], "failures": len(doc["failures"]), "rows": len(doc["rows"]),
            "output_correct": sum(1 for r in doc["rows"] if r.get("output_correct") is True),
            "rebuilt_from_log": bool(doc.get("rebuilt_from_log"))}


def placement_summary(doc: dict) -> dict:
    orders_by_case: dict[str, list[str]] = {}
    for r in doc["rows"]:
        orders = orders_by_case.setdefault("{m}x{n}x{k}".format(**r["case"]), [])
        if r["order"] not in orders:
            orders.append(r["order"])
    analysis = doc.get("analysis", {})
    return {"device": doc["device"], "failures": len(doc["failures"]), "rows": len(doc["rows"]),
            "all_output_correct": all(r["output_correct"] for r in doc["rows"]),
            "placements": sorted({r["placement"] for r in doc["rows"]}),
            "orders_by_case": orders_by_case,
            "analysed_pairs": sorted({a["case"] + " " + " - ".join(a["orders"]) for a in analysis.values()}),
            "placement_bound": sorted(name for name, a in analysis.items() if a["placement_bound"])}


def rule_test_summary(doc: dict) -> dict:
    """A page_test.py verdict and the numbers its rule reads."""
    keys = ("tau_misses", "targets_loss", "mae_l2_hit_pp", "mean_rel_error_dram_read")
    return {"set": doc["set"], "adopted": doc["adopted"], "measured_device": doc["measured_device"],
            **{side: {"test_set": {k: doc[side]["test_set"][k] for k in keys}} for side in ("on", "off")}}


def floor_summary(doc: dict) -> dict:
    return {"decision": doc["decision"], "draws": doc["today"]["draws"], "p_all_target": doc["p_all_target"],
            "session_ncu_s": doc["session_ncu_s"],
            "today_groups": doc["today"]["groups"],
            "today_case_runs": {k: sorted(v["runs"]) for k, v in sorted(doc["today"]["cases"].items())},
            "deeper": [{k: d[k] for k in ("depth", "held_out_perfect_p_all", "device_s_missing_total")}
                       for d in doc["deeper"]],
            "paired_decision": doc.get("paired_not_the_rules", {}).get("decision")}


def fresh_test_summary(doc: dict) -> dict:
    """fresh_test.py's verdict and what its decide() reads."""
    out = {k: doc[k] for k in ("winner_on_fresh", "contention_within_targets_on_table", "default")}
    for model in ("saturating", "contention"):
        out[model] = {"fresh": {k: doc[model]["fresh"][k] for k in ("rows", "tau_misses", "targets_loss",
                                                                    "mae_l2_hit_pp", "mean_rel_error_dram_read")},
                      "committed_table_held_out": {k: doc[model]["committed_table_held_out"][k]
                                                   for k in ("mae_l2_hit_pp", "mean_rel_error_dram_read")}}
    return out


def summarize(folder: Path) -> dict:
    def load(name: str) -> dict:
        return json.loads((folder / name).read_text())

    table = load(TABLE)
    deep_runs: dict[str, int] = {}
    for path in sorted((folder / DEEP).glob("*/*/sim_ncu_rows_*.json")):
        for r in json.loads(path.read_text())["rows"]:
            key = f"{r['device']} | {case_name(r)} | {r['order']}"
            deep_runs[key] = deep_runs.get(key, 0) + 1
    replicate = load("replicate/replicate_test.json")
    return {
        "summary_of": "benchmarks/sim_validation's raw files (raw.manifest.json), by summary.py",
        "device": "measured (NVIDIA H100 80GB HBM3 and NVIDIA H200, ncu); predicted (swizzlelab.sim, each GPU's model)",
        "table": table_summary(table),
        "table_case_runs_before_deep": table_runs(table["rows"], deep_runs),
        "rows_files": {p.relative_to(folder).as_posix(): rows_file_summary(json.loads(p.read_text()))
                       for p in sorted(folder.rglob("sim_ncu_*.json"))},
        "placement_probe": {gpu: placement_summary(load(name)) for gpu, name in PLACEMENT_PROBES.items()},
        "rule_tests": {name: rule_test_summary(load(name)) for name in RULE_TESTS},
        "fresh_test": fresh_test_summary(load("fresh/fresh_test.json")),
        "replicate_test": {"verdict": replicate["verdict"], "left_out": replicate["left_out"],
                           "cases_below_tau_target": replicate["cases_below_tau_target"]},
        "floors": {name: floor_summary(load(name)) for name in FLOORS},
    }
