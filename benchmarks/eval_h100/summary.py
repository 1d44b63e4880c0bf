"""The harness-report study's summary.json, built from its raw files (raw.manifest.json): per task the ranked score,
each case's candidate and baseline times, and per profiled kernel ncu's named figures and occupancy limits.

    python benchmarks/archive.py summarize eval_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path

TASKS = ("flash_attention", "histogram", "lean_attention", "matmul", "spmv", "transpose")
TIME_KEYS = ("mean_ms", "sem_ms", "n", "stopped_by")


def ranked(doc: dict) -> dict:
    cases = [{"case": c["case"], "candidate": {k: c["candidate"].get(k) for k in TIME_KEYS},
              "baseline": {k: (c.get("baseline") or {}).get(k) for k in TIME_KEYS},
              "speedup_vs_baseline": {k: (c.get("speedup_vs_baseline") or {}).get(k) for k in ("speedup", "ci95")}}
             for c in doc["ranked"]["cases"]]
    return {"command": doc["command"], "label": doc["label"], "success": doc["success"],
            "tests": {k: doc["tests"][k] for k in ("passed", "total")}, "score_ms": doc["ranked"]["score_ms"],
            "cases": cases}


def profiled(doc: dict) -> dict:
    kernels = [{"case": p["case"], "kernel_name": k["kernel_name"], "launch_index": k["launch_index"],
                "named": k["named"],
                "occupancy_limits": {m: v for m, v in k["values"].items() if m.startswith("launch__occupancy_limit_")}}
               for p in doc["profiles"] for k in p["kernels"]]
    return {"command": doc["command"], "label": doc["label"], "success": doc["success"], "kernels": kernels}


def summarize(folder: Path) -> dict:
    def load(name: str) -> dict:
        return json.loads((folder / name).read_text())

    every = load("eval_all.json")
    return {"summary_of": "benchmarks/eval_h100's raw files (raw.manifest.json), by summary.py",
            "device": every["device"], "label": every["label"], "runs": every["runs"],
            "stability": {k: v for k, v in load("eval_stability.json").items() if k != "system"},
            "tasks": {t: {"ranked": ranked(load(f"{t}-ranked.json")), "profile": profiled(load(f"{t}-profile.json"))}
                      for t in TASKS}}
