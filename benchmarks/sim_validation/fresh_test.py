"""The fresh test: applies the rule registered before the fresh set was measured (its text: fresh/fresh_test.json's
`rule`) to validate.py's two runs over the committed table plus the fresh rows (run.py --set fresh), one per model.

    python -m benchmarks.sim_validation.fresh_test OUT_JSON SATURATING_JSON CONTENTION_JSON
On the fresh rows alone: fewer cases below tau 0.8 (hit and DRAM together) wins, then the lower targets loss (hit MAE
/ 3 pp + mean DRAM error / 10%). The contention model becomes the default only if it wins and its held-out figures on
the committed table stay within the issue's targets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.lab.case_sets import FRESH_CASES
from benchmarks.lab.validation import TARGETS, case_key, score, score_text

from swizzlelab.io import atomic_write_text


def fresh_keys() -> set[str]:
    return {case_key({"task": task, "case": case}) for task, case, _, _ in FRESH_CASES}


def decide(result: dict[str, Any]) -> tuple[str, bool, str]:
    """(winner on the fresh rows, whether the contention model stays within the targets on the committed table, the
    default the rule gives), from each model's `fresh` and `committed_table_held_out` scores."""
    winner = min(("saturating", "contention"),
                 key=lambda m: (result[m]["fresh"]["tau_misses"], result[m]["fresh"]["targets_loss"]))
    table = result["contention"]["committed_table_held_out"]
    within = table["mae_l2_hit_pp"] <= TARGETS["held_out_mae_l2_hit_pp"] and \
        table["mean_rel_error_dram_read"] <= TARGETS["held_out_mean_rel_error_dram_read"]
    return winner, within, "contention" if winner == "contention" and within else "saturating"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("saturating")
    parser.add_argument("contention")
    args = parser.parse_args(argv)
    fresh = fresh_keys()
    result: dict[str, Any] = {"script": "benchmarks/sim_validation/fresh_test.py",
                              "command": " ".join(["python", "-m", "benchmarks.sim_validation.fresh_test", *argv]),
                              "rule": __doc__.split("\n\n")[1].split("\n", 1)[1].replace("\n", " ")}
    for name, path in (("saturating", args.saturating), ("contention", args.contention)):
        doc = json.loads(Path(path).read_text())
        rows = doc["rows"]
        mine = [r for r in rows if case_key(r) in fresh]
        if not mine:
            raise SystemExit(f"{path}: no fresh rows (run validate.py with the fresh measured file)")
        table = [r for r in rows if case_key(r) not in fresh and r["set"] == "held_out"]
        result.setdefault("measured_device", sorted({r["device"] for r in mine}))
        result[name] = {"file": path, "progress_model": doc["progress_model"], "predicted_by": mine[0]["predicted_by"],
                        "measured_by": mine[0]["measured_by"], "fresh": score(mine),
                        "fresh_by_device": {dev: score([r for r in mine if r["device"] == dev])
                                            for dev in sorted({r["device"] for r in mine})},
                        "committed_table_held_out": score(table)}
    sat, con = result["saturating"]["fresh"], result["contention"]["fresh"]
    winner, within, default = decide(result)
    result.update(winner_on_fresh=winner, contention_within_targets_on_table=within, default=default)
    atomic_write_text(args.out, json.dumps(result, indent=1))
    for name, s in (("saturating", sat), ("contention", con)):
        table = result[name]["committed_table_held_out"]
        print(f"{name}: fresh {score_text(s)}; committed table held out: {table['mae_l2_hit_pp']:.2f} pp, "
              f"{100 * table['mean_rel_error_dram_read']:.1f}%, tau misses {table['tau_misses']}")
    print(f"winner on the fresh rows: {winner}; default by the rule: {result['default']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
