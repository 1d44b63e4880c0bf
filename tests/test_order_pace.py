"""benchmarks/sim_validation/order_pace.py (stop 40): row- against column-major programs' pace and DRAM reads on
stamped launches, square cases only, paired with the table's reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.sim_validation import order_pace as order_pace_script


@pytest.fixture(scope="module")
def order_pace():
    return order_pace_script


def _launches(tmp_path):
    """A probe of one square and one rectangular case, two stamped runs per order; column-major's programs take
    10% longer and read 1.2x on the square case."""
    rows, launches, arrays = [], [], {}
    for case in ("256x256x128", "512x256x128"):
        for order, pace, reads in (("row_major", 100, 1000.0), ("column_major", 110, 1200.0)):
            rows.append({"case": case, "order": order, "launches": ["plain", "stamped_r0", "stamped_r1"]})
            launches += [{"dram__bytes_read.sum": 5.0}, {"dram__bytes_read.sum": reads},
                         {"dram__bytes_read.sum": reads}]
            for r in ("r0", "r1"):
                arrays[f"{case}__{order}_{r}_start"] = np.array([0, 10, 20], dtype=np.int32)
                arrays[f"{case}__{order}_{r}_duration"] = np.array([pace, pace, pace], dtype=np.int32)
                arrays[f"{case}__{order}_{r}_sm"] = np.array([0, 1, 2], dtype=np.int16)
    path = tmp_path / "launches_h100_x.json"
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "probe": {"rows": rows}, "launches": launches}))
    np.savez(tmp_path / "launches_h100_x.npz", **arrays)
    return path


def test_square_cases_only_with_their_ratios(order_pace, tmp_path):
    table = [{"task": "matmul", "case": {"seed": 1, "m": 256, "n": 256, "k": 128}, "order": o,
              "device": "NVIDIA H100 80GB HBM3", "measured_dram_read_bytes": b}
             for o, b in (("row_major", 2000.0), ("column_major", 1800.0))]
    path = _launches(tmp_path)
    rows = order_pace.cases_of(path, json.loads(path.read_text()), table)
    assert [r["case"] for r in rows] == ["256x256x128"]
    ratios = rows[0]["column_over_row"]
    assert ratios["median_program"] == pytest.approx(1.1)
    assert ratios["span"] == pytest.approx(130 / 120)
    assert ratios["stamped_dram_reads"] == pytest.approx(1.2)
    assert ratios["table_dram_reads"] == pytest.approx(0.9)
    assert rows[0]["orders"]["row_major"]["launches"] == 2
