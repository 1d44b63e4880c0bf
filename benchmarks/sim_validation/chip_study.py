"""The chip study of the validation table's missed pairs (issue 15, part 2): is a pair's measured order the same on
every chip of a GPU kind? Reads placement_probe.py files, one chip (device call) each, and applies the rule
registered before the calls were made (sim_validation README, "Placement probe and chip study").

    python -m benchmarks.sim_validation.chip_study OUT.json FILE [FILE ...] [--table sim_validation.json]

A chip's rows are its placement 0 and 1 launches (the morning probe's; the later calls measured placement 0 only).
A pair is chip-bound on a metric when two chips' mean differences lie on opposite sides of zero, each beyond twice
its own standard error (with one launch pair, the pooled within-chip spread). A chip-bound pair counts as a tie in
a chip-aware tau of the table's held-out cases, reported beside the strict tau.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lab import placement as probe
from benchmarks.lab.validation import case_summary
from swizzlelab.io import atomic_write_text

HERE = Path(__file__).resolve().parent
CHIP_PLACEMENTS = (0, 1)
TARGET_TAU = 0.8


def kind_of(device: str) -> str:
    return "H200" if "H200" in device else "H100"


def chip_rows(paths: list[str]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(chip label, GPU kind, rows) of each file: its UUID where recorded, else the file's path."""
    out = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        label = doc.get("gpu_uuid_serial") or f"{path} (no UUID recorded)"
        rows = [r for r in doc["rows"] if r["placement"] in CHIP_PLACEMENTS and r.get("layout", "default") == "default"
                and r["measured_dram_read_bytes"] is not None]
        out.append((label, kind_of(doc["device"]), rows))
    return out


def study(chips: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per GPU kind, case, pair and metric: each chip's mean difference and standard error, and the verdict."""
    pairs: dict[tuple[str, str, str, str, str], dict[str, list[float]]] = {}
    for label, kind, rows in chips:
        for key in {probe.case_key(r["case"]) for r in rows}:
            crows = [r for r in rows if probe.case_key(r["case"]) == key]
            orders = list(dict.fromkeys(r["order"] for r in crows))
            for o1, o2 in itertools.combinations(orders, 2):
                for metric in probe.METRIC_FIELDS:
                    diffs = [d for v in probe.launch_differences(crows, o1, o2, metric).values() for d in v]
                    pairs.setdefault((kind, key, o1, o2, metric), {})[label] = diffs
    out = {}
    for (kind, key, o1, o2, metric), by_chip in sorted(pairs.items()):
        spread = [d - np.mean(v) for v in by_chip.values() if len(v) >= 2 for d in v]
        dof = len(spread) - sum(1 for v in by_chip.values() if len(v) >= 2)
        pooled_sd = float(np.sqrt(np.sum(np.square(spread)) / dof)) if dof > 0 else float("inf")
        chips_out = {label: {"mean": float(np.mean(v)), "n": len(v),
                             "se": float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) >= 2 else pooled_sd}
                     for label, v in by_chip.items()}
        above = [c for c, s in chips_out.items() if s["mean"] > 2 * s["se"]]
        below = [c for c, s in chips_out.items() if s["mean"] < -2 * s["se"]]
        out[f"{kind} {key} {o1} - {o2} {metric}"] = {
            "kind": kind, "case": key, "orders": [o1, o2], "metric": metric,
            "unit": "relative difference" if metric == "dram" else "pp", "chips": chips_out,
            "chips_above": above, "chips_below": below, "chip_bound": bool(above and below)}
    return out


def chip_aware_tau(table: dict[str, Any], verdicts: dict[str, Any]) -> dict[str, Any]:
    """Each held-out case's strict tau (validate.py's, as the table has it) and its tau with the chip-bound pairs of
    its GPU kind counted as ties (validate.case_summary's extra ties), per metric."""
    bound: dict[tuple[str, str, str], set[frozenset]] = defaultdict(set)
    for v in verdicts.values():
        if v["chip_bound"]:
            bound[(v["kind"], v["case"], v["metric"])].add(frozenset(v["orders"]))
    cases: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in table["rows"]:
        if r["set"] == "held_out" and r["task"] == "matmul":  # the probed pairs are all matmul's
            cases[(kind_of(r["device"]), probe.case_key(r["case"]))].append(r)
    out = {}
    for (kind, key), crows in sorted(cases.items()):
        ties = {metric: frozenset(bound[(kind, key, metric)]) for metric in ("hit", "dram")}
        strict, aware = case_summary(crows), case_summary(crows, hit_ties=ties["hit"], dram_ties=ties["dram"])
        for metric, tau_key in (("hit", "kendall_tau_hit"), ("dram", "kendall_tau_dram_read")):
            if strict[tau_key]["tau"] is not None:
                out[f"{kind} {key} {metric}"] = {"strict_tau": strict[tau_key]["tau"],
                                                 "chip_bound_pairs": sorted(sorted(p) for p in ties[metric]),
                                                 "chip_aware_tau": aware[tau_key]["tau"]}
    return {"cases": out,
            "strict_below_target": sorted(n for n, v in out.items() if v["strict_tau"] < TARGET_TAU),
            "chip_aware_below_target": sorted(n for n, v in out.items()
                                              if v["chip_aware_tau"] is not None and v["chip_aware_tau"] < TARGET_TAU)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--table", default=str(HERE / "sim_validation.json"))
    args = parser.parse_args(argv)
    chips = chip_rows(args.files)
    verdicts = study(chips)
    taus = chip_aware_tau(json.loads(Path(args.table).read_text()), verdicts)
    doc = {"script": "benchmarks/sim_validation/chip_study.py",
           "command": " ".join(["python", "-m", "benchmarks.sim_validation.chip_study", *argv]),
           "device": "analysis of measured files: " + "; ".join(f"{kind} {label}" for label, kind, _ in chips),
           "rule": __doc__.split("\n\n")[1].replace("\n", " "), "pairs": verdicts, "tau": taus}
    atomic_write_text(args.out, json.dumps(doc, indent=1))
    for name, v in verdicts.items():
        scale, unit = (100, "%") if v["metric"] == "dram" else (1, " pp")
        chips_text = ", ".join(f"{s['mean'] * scale:+.1f}{unit} (se {s['se'] * scale:.1f}, n {s['n']})"
                               for s in v["chips"].values())
        print(f"{name}: {chips_text}; chip-bound: {v['chip_bound']}")
    print(f"held-out cases below tau {TARGET_TAU}: strict {taus['strict_below_target']}; "
          f"chip-aware {taus['chip_aware_below_target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
