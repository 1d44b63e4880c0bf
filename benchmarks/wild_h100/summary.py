"""The wild-kernel study's summary.json, built from its raw files (raw.manifest.json): wild_h100.json's result and the
iterations of the optimize log it names.

    python benchmarks/archive.py summarize wild_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path


def summarize(folder: Path) -> dict:
    doc = json.loads((folder / "wild_h100.json").read_text())
    records = [json.loads(line) for line in (folder / "opt" / "iterations.jsonl").read_text().splitlines()]
    return {"summary_of": "benchmarks/wild_h100's raw files (raw.manifest.json), by summary.py", **doc,
            "optimize_log_iterations": sorted(r["iteration"] for r in records if r.get("type") == "iteration")}
