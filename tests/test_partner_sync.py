"""benchmarks/sim_validation/partner_sync.py: which partner pairs start together and how much of their gap they close,
on hand-made stamps, on a cut of the measured launches (both GPUs' row- and column-major of 16384^2x4096, committed
under tests/data) and, with the raw data restored (-m raw), on the whole launches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import archive
from benchmarks.sim_validation import partner_sync

FOLDER = Path(partner_sync.__file__).resolve().parent


@pytest.fixture(scope="module")
def sync():
    return partner_sync


def test_pairs_within_reach_and_the_gap_they_close(sync):
    # Programs 2 apart are partners; a step is 1 (median duration 10 over 10 steps). Pair (0, 2) starts 3 apart and
    # ends 1 apart (program 2 is 2 steps shorter): it closes 2 steps. Pair (1, 3) starts 15 apart and keeps it.
    stats = sync.pair_stats(np.array([0.0, 5.0, 3.0, 20.0]), np.array([10.0, 10.0, 8.0, 10.0]), 2, 10, 12.0)
    assert stats == {"share_within": 0.5, "gap_change_steps": -1.0}


CUT = Path(__file__).resolve().parent / "data" / "sim_validation" / "launches_cut"


def test_a_cut_of_the_measured_launches_gives_its_figures(sync, tmp_path):
    # Programs 8192-8959 of two launches per order (tests/data/sim_validation/launches_cut): the figures partner_sync
    # gave them when the cut was made, and on this cut too the H200's row-major partners start apart more often.
    out = tmp_path / "sync.json"
    assert sync.main([str(out), "--launches", str(CUT)]) == 0
    rows = {(r["device"].split()[1], r["order"]): r for r in json.loads(out.read_text())["rows"]}
    expected = {("H100", "row_major"): (0.6, -1.2857946446397643), ("H100", "column_major"): (0.6, -1.927996845916512),
                ("H200", "row_major"): (0.3703125, -1.3525285045378383),
                ("H200", "column_major"): (0.48671875, -1.3249826159649927)}
    assert set(rows) == set(expected) and all(r["launches"] == 2 for r in rows.values())
    for key, (share, gap) in expected.items():
        assert (rows[key]["share_within"], rows[key]["gap_change_steps"]) == pytest.approx((share, gap), rel=1e-12), key
    assert rows[("H200", "row_major")]["share_within"] < rows[("H200", "column_major")]["share_within"] - 0.05


@pytest.mark.raw
def test_the_measured_launches_give_the_committed_file(sync, tmp_path):
    assert archive.complete(FOLDER), "raw data absent: python benchmarks/archive.py restore sim_validation"
    out = tmp_path / "sync.json"
    assert sync.main([str(out)]) == 0
    rows = {(r["device"], r["order"]): r for r in json.loads(out.read_text())["rows"]}
    committed = {(r["device"], r["order"]): r for r in json.loads((FOLDER / "partner_sync.json").read_text())["rows"]}
    assert rows == committed and len(rows) == 4
    h200 = [d for d, _ in rows if "H200" in d][0]
    # The H200's row-major partners start apart more often than its column-major ones (the README's finding).
    assert rows[(h200, "row_major")]["share_within"] < rows[(h200, "column_major")]["share_within"] - 0.05


def test_a_rectangular_case_is_refused(sync, tmp_path):
    with pytest.raises(SystemExit, match="square output"):
        sync.main([str(tmp_path / "x.json"), "--case", "16384x4096x8192"])
