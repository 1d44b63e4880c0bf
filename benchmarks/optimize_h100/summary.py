"""The optimize study's summary.json, built from its raw files (raw.manifest.json): optimize_h100.json's rows and
what each task's iteration log holds (iterations, each with a permutation id).

    python benchmarks/archive.py summarize optimize_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path


def iteration_log(path: Path) -> dict:
    iterations = [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "iteration"]
    return {"iteration_records": len(iterations),
            "all_have_permutation_id": all(r["permutation_id"] for r in iterations)}


def summarize(folder: Path) -> dict:
    doc = json.loads((folder / "optimize_h100.json").read_text())
    tasks = {name: {k: v for k, v in task.items() if k != "best_formula"} for name, task in doc["tasks"].items()}
    return {"summary_of": "benchmarks/optimize_h100's raw files (raw.manifest.json), by summary.py",
            **{k: v for k, v in doc.items() if k != "tasks"}, "tasks": tasks,
            # The command is the one that ran, when the script was benchmarks/optimize_h100.py.
            "script": "benchmarks/optimize_h100/run.py",
            "iteration_logs": {name: iteration_log(folder / name / "iterations.jsonl") for name in doc["tasks"]}}
