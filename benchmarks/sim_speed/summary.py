"""The simulator-speed study's summary.json, built from its raw files (raw.manifest.json): each run's machine and
every stage's rates and engine-agreement flags, without per-repeat times and candidate lists.

    python benchmarks/archive.py summarize sim_speed     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path

RUN_KEYS = ("script", "command", "device", "cpu", "cores", "gpu", "progress")
DROP = ("label", "note", "notes", "engine_note", "first_call_note", "phases_note")


def figures(row: dict) -> dict:
    """A stage row's scalars and its flag tables (equal_to_cpu_engine and the like), labels and notes left out."""
    def flags(value: object) -> bool:
        return isinstance(value, dict) and all(isinstance(v, bool) for v in value.values())

    return {k: v for k, v in row.items()
            if k not in DROP and (v is None or isinstance(v, (str, int, float, bool)) or flags(v))}


def summarize(folder: Path) -> dict:
    runs = {}
    for path in sorted(folder.glob("sim_speed_*.json")):
        doc = json.loads(path.read_text())
        stages = {name: [figures(r) for r in rows] if isinstance(rows, list) else figures(rows)
                  for name, rows in doc["stages"].items()}
        runs[path.name] = {**{k: doc[k] for k in RUN_KEYS if k in doc}, "stages": stages}
    return {"summary_of": "benchmarks/sim_speed's raw files (raw.manifest.json), by summary.py",
            "device": "measured (this CI machine's CPU; an H100 host's CPU and GPU): see each run", "runs": runs}
