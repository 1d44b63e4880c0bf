"""The evaluator-overhead study's summary.json, built from its raw files (raw.manifest.json): per case the mean time
of each method in both runs (the isolated evaluator against in-process --trusted), without the per-segment rows.

    python benchmarks/archive.py summarize eval_overhead_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = ("eval_overhead_shared_loop.json", "eval_overhead.json")


def summarize(folder: Path) -> dict:
    runs = {}
    for name in RUNS:
        doc = json.loads((folder / name).read_text())
        runs[name] = {**{k: doc[k] for k in ("script", "command", "device", "label", "rounds", "budget_s", "methods")},
                      "cases": doc["cases"]}
    return {"summary_of": "benchmarks/eval_overhead_h100's raw files (raw.manifest.json), by summary.py",
            "device": runs[RUNS[0]]["device"], "runs": runs}
