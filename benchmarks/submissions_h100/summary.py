"""The example submissions' study summary.json, built from its raw files (raw.manifest.json): the leader runs, the
ranked report, and every step file's rows, paired comparisons and profiled kernels (the numbers docs/worklogs cite).

    python benchmarks/archive.py summarize submissions_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# The files docs/worklogs' tables cite (tests/test_leaderboard_examples.py matches each cited number here).
CITED = re.compile(r"^(steps_\d+(_unpaired)?|leader_h100(_sustained|_20261124|_v\d+)?|flash_attention-ranked|ranked_runs)"
                   r"\.json$")
TEXT = ("check", "method", "submission", "source", "report_text")


def scalars(record: dict) -> dict:
    """A row's or a paired comparison's names and numbers (its CI too), without samples, checks and reports."""
    return {k: v for k, v in record.items()
            if k not in TEXT and (isinstance(v, (int, float, str)) or v is None or k.endswith("ci95"))}


def profile(record: dict) -> dict:
    """A profile's kernels as ncu named them, their launch figures and the extra metrics (torch's fill kernels left out)."""
    kernels = [{g: k.get(g) for g in ("kernel", "named", "launch", "extra")} for k in record.get("kernels", [])
               if not str(k.get("kernel", "")).startswith("void at::")]
    return {"name": record.get("name"), "kernels": kernels}


def cited_file(doc: dict) -> dict:
    return {"rows": [scalars(r) for r in doc.get("rows", [])], "paired": [scalars(p) for p in doc.get("paired", [])],
            "profiles": [profile(p) for p in doc.get("profiles", [])]}


def summarize(folder: Path) -> dict:
    def load(name: str) -> dict:
        return json.loads((folder / name).read_text())

    leader = load("leader_h100.json")
    ranked = load("flash_attention-ranked.json")
    case = ranked["ranked"]["cases"][0]
    return {
        "summary_of": "benchmarks/submissions_h100's raw files (raw.manifest.json), by summary.py",
        "device": leader["device"],
        "leader": {**{k: leader[k] for k in ("device", "command", "date_utc", "label", "kind")},
                   "runs": [{k: r[k] for k in ("task", "submission", "passed", "reason", "score_ms")}
                            for r in leader["runs"]],
                   "rows": leader["rows"]},
        "leader_variant_check_log": (folder / "leader_variant_check.log").read_text(),
        "sustained_flash_attention_autotune": load("leader_h100_sustained.json")["flash_attention_autotune"],
        "ranked_report": {"success": ranked["success"], "isolated": ranked["isolated"], "kernel": ranked["kernel"],
                          "tests": {k: ranked["tests"][k] for k in ("passed", "total")},
                          "case": {"check_passed": case["check"]["passed"],
                                   "candidate": {k: case["candidate"][k] for k in ("n", "device", "mean_ms")},
                                   "baseline": {"mean_ms": case["baseline"]["mean_ms"]}},
                          "isolation_line": next(line for line in (folder / "flash_attention-ranked.txt").read_text()
                                                 .splitlines() if line.startswith("Isolation:"))},
        "files": {p.name: cited_file(json.loads(p.read_text()))
                  for p in sorted(folder.glob("*.json")) if CITED.match(p.name)},
    }
