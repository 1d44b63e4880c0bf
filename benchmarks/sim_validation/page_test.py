"""Rules 2 and 3 of the page-noise study (stop 38) and rule 4 of the program-pace study (stop 39): a term judged on
its own fresh set alone (run.py --set page | pace), from validate.py's two runs over the committed table plus those
rows, one with the term off, one on.

    python -m benchmarks.sim_validation.page_test OUT_JSON OFF_JSON ON_JSON [--device "NVIDIA H200"] [--set page]
On the set's rows alone (of the GPUs whose name starts with --device; "" for every GPU): fewer cases below tau 0.8
(hit and DRAM together) wins, then the lower targets loss (hit MAE / 3 pp + mean DRAM error / 10%). The term
becomes the default only if it wins and its rows of the set stay within 3 pp and 10%.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.lab.case_sets import CASE_SETS
from benchmarks.lab.validation import TARGETS, case_key, score, score_text

from swizzlelab.io import atomic_write_text

ARMS = ("off", "on")


def page_keys(name: str = "page") -> set[str]:
    """The case keys of a registered test set of run.py (page: PAGE_CASES, pace: PACE_CASES)."""
    return {case_key({"task": task, "case": case}) for task, case, _, _ in CASE_SETS[name]}


def decide(scores: dict[str, dict[str, Any]]) -> tuple[str, bool, bool]:
    """(the arm that wins on the page rows, whether the "on" arm stays within the targets there, adopted)."""
    winner = min(ARMS, key=lambda arm: (scores[arm]["tau_misses"], scores[arm]["targets_loss"]))
    on = scores["on"]
    within = on["mae_l2_hit_pp"] <= TARGETS["held_out_mae_l2_hit_pp"] and \
        on["mean_rel_error_dram_read"] <= TARGETS["held_out_mean_rel_error_dram_read"]
    return winner, within, winner == "on" and within


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("off", help="validate.py's output with the term off (--page-grid 0, --program-grid 0)")
    parser.add_argument("on", help="validate.py's output with it on (--page-grid 0.9, --program-grid 0.01)")
    parser.add_argument("--device", default="NVIDIA H200",
                        help="judge the rows of the GPUs whose name starts so (\"\" for every GPU)")
    parser.add_argument("--set", choices=["page", "pace"], default="page", help="which registered set's rows")
    args = parser.parse_args(argv)
    keys = page_keys(args.set)
    result: dict[str, Any] = {"script": "benchmarks/sim_validation/page_test.py",
                              "command": " ".join(["python", "-m", "benchmarks.sim_validation.page_test", *argv]),
                              "rule": __doc__.split("\n\n")[1].split("\n", 1)[1].replace("\n", " ")}
    scores = {}
    for arm, path in (("off", args.off), ("on", args.on)):
        doc = json.loads(Path(path).read_text())
        mine = [r for r in doc["rows"] if case_key(r) in keys and r["device"].startswith(args.device)]
        if not mine:
            raise SystemExit(f"{path}: no rows of the {args.set} set of {args.device or 'any GPU'} (run validate.py "
                             f"with run.py --set {args.set}'s file)")
        result.setdefault("measured_device", sorted({r["device"] for r in mine}))
        scores[arm] = score(mine)
        result[arm] = {"file": path, "fitted_page_noise": doc.get("fitted_page_noise"),
                       "fitted_program_cv": doc.get("fitted_program_cv", 0.0),
                       "predicted_by": mine[0]["predicted_by"], "measured_by": mine[0]["measured_by"],
                       "test_set": scores[arm]}
    winner, within, adopted = decide(scores)
    result.update(set=args.set, winner_on_test_set=winner, on_within_targets=within, adopted=adopted)
    atomic_write_text(args.out, json.dumps(result, indent=1))
    for arm in ARMS:
        print(f"term {arm}: {score_text(scores[arm])}")
    print(f"winner on the {args.set} set: {winner}; within targets: {within}; adopted for the "
          f"{args.device or 'every GPU'} model: {adopted}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
