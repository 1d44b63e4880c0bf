"""Rules 2 and 3 of the page-noise study (stop 38): a GPU model's page noise judged on the page set alone (run.py
--set page), from validate.py's two runs over the committed table plus those rows, one at page_noise 0, one at 0.9.

    python benchmarks/sim_validation/page_test.py OUT_JSON OFF_JSON ON_JSON [--device "NVIDIA H200"]
On the page set's rows alone (of the GPU whose name starts with --device): fewer cases below tau 0.8 (hit and DRAM
together) wins, then the lower targets loss (hit MAE / 3 pp + mean DRAM error / 10%). Page noise 0.9 becomes that
GPU model's default only if it wins and its page-set rows stay within 3 pp and 10%.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fresh_test import score, score_text
from run import PAGE_CASES
from validate import TARGETS, case_key

from swizzlelab.io import atomic_write_text

ARMS = ("off", "on")


def page_keys() -> set[str]:
    return {case_key({"task": task, "case": case}) for task, case, _, _ in PAGE_CASES}


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
    parser.add_argument("off", help="validate.py's output at --page-grid 0")
    parser.add_argument("on", help="validate.py's output at --page-grid 0.9")
    parser.add_argument("--device", default="NVIDIA H200", help="judge the rows of the GPU whose name starts so")
    args = parser.parse_args(argv)
    keys = page_keys()
    result: dict[str, Any] = {"script": "benchmarks/sim_validation/page_test.py",
                              "command": " ".join(["python", "benchmarks/sim_validation/page_test.py", *argv]),
                              "rule": __doc__.split("\n\n")[1].split("\n", 1)[1].replace("\n", " ")}
    scores = {}
    for arm, path in (("off", args.off), ("on", args.on)):
        doc = json.loads(Path(path).read_text())
        mine = [r for r in doc["rows"] if case_key(r) in keys and r["device"].startswith(args.device)]
        if not mine:
            raise SystemExit(f"{path}: no rows of the page set (run validate.py with run.py --set page's file)")
        result.setdefault("measured_device", sorted({r["device"] for r in mine}))
        scores[arm] = score(mine)
        result[arm] = {"file": path, "fitted_page_noise": doc.get("fitted_page_noise"),
                       "predicted_by": mine[0]["predicted_by"], "measured_by": mine[0]["measured_by"],
                       "page_set": scores[arm]}
    winner, within, adopted = decide(scores)
    result.update(winner_on_page_set=winner, on_within_targets=within, adopted=adopted)
    atomic_write_text(args.out, json.dumps(result, indent=1))
    for arm in ARMS:
        print(f"page noise {arm}: {score_text(scores[arm])}")
    print(f"winner on the page set: {winner}; within targets: {within}; adopted for the {args.device} model: {adopted}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
