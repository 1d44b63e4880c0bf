"""benchmarks/sim_validation/rows_from_log.py (stop 41): run.py's rows rebuilt from its log, for a call whose rows
files did not come back; checked against a call whose files did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.sim_validation import rows_from_log

# Three of the five calls of the H100's deepening (benchmarks/sim_validation/deep/h100, raw data): their log lines and
# the rows run.py wrote, cut to the figures the rebuild reads.
CUT = Path(__file__).resolve().parent / "data" / "sim_validation"
HEADER = json.dumps({"script": "benchmarks/sim_validation/run.py", "command": "python run.py X --repeat 2",
                     "device": "NVIDIA H200"})


@pytest.fixture(scope="module")
def rl():
    return rows_from_log


def test_rebuild_reads_orders_with_colons_and_counts_repeats(rl):
    log = "\n".join([
        HEADER,
        "matmul {'seed': 21, 'm': 64, 'n': 64, 'k': 128}: 2 rows in 16 s: row_major 82.48% 344430848.0, "
        "grouped:GROUP_M=8 78.95% 380148224.0",
        "matmul {'seed': 21, 'm': 64, 'n': 64, 'k': 128}: 2 rows in 11 s: row_major 84.04% 354424832.0, "
        "grouped:GROUP_M=8 81.94% 380213504.0",
        "done in 30 s, 4 rows, failures: 0 -> /root/out/x/sim_ncu_rows_nvidia_h200.json"])
    (doc,) = rl.rebuild(log)
    assert [(r["order"], r["repeat"], r["measured_l2_hit_pct"], r["measured_dram_read_bytes"]) for r in doc["rows"]] == [
        ("row_major", 0, 82.48, 344430848.0), ("grouped:GROUP_M=8", 0, 78.95, 380148224.0),
        ("row_major", 1, 84.04, 354424832.0), ("grouped:GROUP_M=8", 1, 81.94, 380213504.0)]
    assert doc["rows"][0]["case"] == {"seed": 21, "m": 64, "n": 64, "k": 128}
    assert all(r["output_correct"] is None and r["device"] == "NVIDIA H200" for r in doc["rows"])


@pytest.mark.parametrize("tail", ["done in 30 s, 3 rows, failures: 0 -> x", "done in 30 s, 2 rows, failures: 1 -> x", ""])
def test_rebuild_refuses_a_log_that_does_not_add_up(rl, tail):
    log = "\n".join([HEADER, "matmul {'seed': 1, 'm': 64}: 2 rows in 1 s: row_major 80.0% 1.0, column_major 70.0% 2.0",
                     tail])
    with pytest.raises(ValueError):
        rl.rebuild(log)


def test_rebuild_matches_run_py_rows_of_the_h100_call(rl):
    # The H100 call of the deepening brought its rows files back; its log, rebuilt, gives the same figures row for row.
    docs = rl.rebuild((CUT / "log_deep_h100_cut.txt").read_text())
    cut = json.loads((CUT / "rows_deep_h100_cut.json").read_text())["rows"]
    assert len(docs) == len(cut) == 3
    for doc, name in zip(docs, ["fresh0", "fresh1", "pace5"]):
        real = cut[name]
        assert [(r["order"], r["case"], float(r["measured_l2_hit_pct"]), float(r["measured_dram_read_bytes"]))
                for r in real] == [(r["order"], r["case"], r["measured_l2_hit_pct"], r["measured_dram_read_bytes"])
                                   for r in doc["rows"]]
