"""Rebuilds run.py's rows files from its log, for a call whose rows files did not come back from the GPU host
(stop 41: written three folders down, where the device tool returns none); the log holds every run it measured.

    python benchmarks/sim_validation/rows_from_log.py LOG OUT_DIR
Each run.py invocation in LOG (its header line, then one line per case run) becomes OUT_DIR/<n>/sim_ncu_rows_<gpu>.json
with the header as run.py wrote it and one row per order: task, case, order, device, repeat, ncu's hit rate and DRAM
read bytes as printed (the hit rate as ncu reports it, the bytes whole). What the log lacks stays out: the other
counters, occupancy and the output check (`output_correct` is None, `rebuilt_from_log` True). validate.py needs
only the two figures of a row that joins an order measured before (the first run's row stands for the rest).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

from swizzlelab.io import atomic_write_text

CASE_LINE = re.compile(r"^(?P<task>\w+) (?P<case>\{[^}]*\}): (?P<n>\d+) rows in \d+ s: (?P<rest>.*)$")
DONE_LINE = re.compile(r"^done in \d+ s, (?P<n>\d+) rows, failures: (?P<failures>\d+) -> ")
ORDER_PART = re.compile(r"^(?P<order>\S+) (?P<hit>[0-9.]+|None)% (?P<bytes>[0-9.e+]+|None)$")


def parse_orders(rest: str) -> list[tuple[str, float, float]]:
    """(order, hit %, DRAM read bytes) of one case line's tail; refuses a part it cannot read."""
    out = []
    for part in rest.split(", "):
        m = ORDER_PART.match(part.strip())
        if m is None or "None" in (m["hit"], m["bytes"]):
            raise ValueError(f"cannot read {part!r}")
        out.append((m["order"], float(m["hit"]), float(m["bytes"])))
    return out


def rebuild(log_text: str) -> list[dict[str, Any]]:
    """One rows document per run.py invocation of the log, in order; refuses an invocation whose rows do not add
    up to its `done` line or that reported failures."""
    docs: list[dict[str, Any]] = []
    doc: dict[str, Any] | None = None
    for line in log_text.splitlines():
        if line.startswith("{") and '"script": "benchmarks/sim_validation/run.py"' in line:
            doc = {**json.loads(line), "rows": [], "failures": [], "rebuilt_from_log": True}
            docs.append(doc)
            repeat: dict[str, int] = {}
            continue
        m = CASE_LINE.match(line)
        if m and doc is not None:
            case = ast.literal_eval(m["case"])
            orders = parse_orders(m["rest"])
            if len(orders) != int(m["n"]):
                raise ValueError(f"{line[:80]}: {m['n']} rows announced, {len(orders)} read")
            key = m["case"]
            repeat[key] = repeat.get(key, -1) + 1
            doc["rows"] += [{"task": m["task"], "case": case, "order": order, "device": doc["device"],
                             "repeat": repeat[key], "measured_l2_hit_pct": hit, "measured_dram_read_bytes": read,
                             "output_correct": None, "rebuilt_from_log": True} for order, hit, read in orders]
            continue
        m = DONE_LINE.match(line)
        if m and doc is not None:
            if int(m["n"]) != len(doc["rows"]) or int(m["failures"]):
                raise ValueError(f"{line[:80]}: {len(doc['rows'])} rows read from the log")
            doc["done"] = line
    if not docs or any("done" not in d for d in docs):
        raise ValueError("the log has no finished run.py invocation")
    return docs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("out_dir")
    args = parser.parse_args(argv)
    try:
        docs = rebuild(Path(args.log).read_text())
    except (OSError, ValueError, SyntaxError) as exc:
        raise SystemExit(f"cannot rebuild rows from {args.log}: {exc}") from exc
    for i, doc in enumerate(docs):
        tag = re.sub(r"[^a-z0-9]+", "_", doc["device"].lower()).strip("_")[:40]
        path = Path(args.out_dir) / str(i) / f"sim_ncu_rows_{tag}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        doc["rebuilt_by"] = "python benchmarks/sim_validation/rows_from_log.py " + " ".join(argv)
        atomic_write_text(str(path), json.dumps(doc, indent=1))
        print(f"{path}: {len(doc['rows'])} rows ({doc['command']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
