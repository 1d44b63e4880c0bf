"""The validation table's rules (benchmarks/lab/validation.py) and validate.py's options: SM pace for L2-bound tasks
only (ncu's lookup throughput as the evidence), runs merged into means, ties, points and losses."""

from __future__ import annotations

import pytest

from benchmarks.lab import validation
from benchmarks.sim_validation import validate as validate_cli


@pytest.fixture(scope="module")
def scripts():
    """The validation table's rules (benchmarks/lab/validation.py)."""
    return validation, None


def _row(task, case, device, sectors, ns, order="row_major"):
    return {"task": task, "case": case, "order": order, "device": device,
            "counters": {"lts__t_sectors.sum": sectors, "gpu__time_duration.sum": ns}}


def test_sm_pace_follows_the_tasks_declared_class_with_its_evidence(scripts):
    validate, _ = scripts
    fast = _row("matmul", {"seed": 1, "m": 64}, "H", 2.5e8, 1e6)  # 2.5e8 x 32 B in 1 ms: 8 TB/s
    slow = _row("spmv", {"seed": 1, "rows": 8}, "H", 1e8, 1e6)  # 3.2 TB/s
    later = _row("spmv", {"seed": 1, "rows": 8}, "H", 1.5e8, 1e6, order="stride")  # 4.8 TB/s
    assert validate.l2_lookup_tbps(fast) == pytest.approx(8.0)
    evidence = validate.l2_bound_evidence([fast, slow, later], {"matmul": True, "spmv": False})
    assert evidence == {
        "H | matmul m=64": {"l2_lookup_tbps_min": pytest.approx(8.0), "l2_lookup_tbps_max": pytest.approx(8.0),
                            "task_l2_bound": True},
        "H | spmv rows=8": {"l2_lookup_tbps_min": pytest.approx(3.2), "l2_lookup_tbps_max": pytest.approx(4.8),
                            "task_l2_bound": False}}
    point = (0.2, 0.0, 0.0, 0.1, 0.5, 0.25, 0.02, 1.0)
    assert validate.effective(point, True) == point
    assert validate.effective(point, False) == (0.2, 0.0, 0.0, 0.1, 0.0, 0.25, 0.02, 1.0)
    walk = validate.random_walk_point(0.5)
    assert validate.effective(walk, False) == walk  # the random walk has no pace to switch off
    assert validate.point_label(point) == "0.2,l0.1,g0.5,s0.25,m0.02" and validate.point_label(walk) == "0.5"
    # A capacity scale of 1 keeps the labels and cache keys earlier runs wrote; another scale gets its own.
    larger = (*point[:7], 1.1)
    assert validate.point_label(larger) == "0.2,l0.1,g0.5,s0.25,m0.02,c1.1"
    row = {"device": "NVIDIA H100 80GB HBM3", "task": "matmul", "case": {"m": 64}, "order": "row_major",
           "occupancy": 2}
    assert "capacity_scale" not in validate.cache_key(row, point)
    assert validate.cache_key(row, larger) != validate.cache_key(row, point)


def test_validation_rows_measured_several_times_are_compared_with_their_mean(scripts):
    validate, _ = scripts

    def run(order, hit, dram, seed, device="H"):
        return {"task": "matmul", "case": {"seed": seed, "m": 64}, "order": order, "device": device,
                "measured_l2_hit_pct": hit, "measured_dram_read_bytes": dram, "measured_dram_write_bytes": 10,
                "counters": {"first": seed}}

    rows = [run("a", 80.0, 100, 1), run("b", 50.0, 400, 1), run("a", 83.0, 130, 2), run("a", 83.0, 130, 3),
            run("a", 70.0, 1, 1, device="G")]
    merged = {(r["device"], r["order"]): r for r in validate.merge_runs(rows)}
    assert len(merged) == 3  # the same order on another GPU stays apart, the seed does not split runs
    a = merged[("H", "a")]
    assert a["measured_runs"] == 3 and a["measured_l2_hit_pct"] == pytest.approx(82.0)
    assert a["measured_dram_read_bytes"] == pytest.approx(120.0)
    assert a["measured_l2_hit_pct_runs"] == [80.0, 83.0, 83.0] and a["counters"] == {"first": 1}
    assert merged[("H", "b")]["measured_runs"] == 1 and merged[("G", "a")]["measured_l2_hit_pct"] == 70.0


def test_discordant_pairs_carry_welch_p_over_the_runs_and_ties_stay_out(scripts):
    validate, _ = scripts
    # Orders a, b, c: the model swaps a and b; c is measured within the tie threshold of b and left out.
    runs = [[80.0, 80.5, 79.5, 80.2], [83.0, 83.4, 82.6, 83.1], [83.3, 83.0, 83.6, 83.4]]
    measured = [sum(r) / len(r) for r in runs]
    predicted = [82.0, 81.0, 84.0]
    out = validate.tau_untied(predicted, measured, lambda i, j: abs(measured[i] - measured[j]) < 1.0,
                              ["a", "b", "c"], runs)
    assert out["pairs"] == 2 and out["measured_ties"] == 1 and out["discordant"] == 1
    assert out["tau"] == 0.0
    (pair,) = out["discordant_pairs"]
    assert pair["orders"] == ["a", "b"] and pair["runs"] == [4, 4]
    assert pair["welch_p"] < 1e-4  # 3 pp apart with a spread of about 0.4 pp: far beyond noise
    # A single run per row gives the pair but no p (no spread to test against).
    one = validate.tau_untied(predicted, measured, lambda i, j: False, ["a", "b", "c"], [[m] for m in measured])
    assert all("welch_p" not in p for p in one["discordant_pairs"]) and one["discordant"] == 1


def test_contention_points_keep_the_saturating_keys_and_get_their_own(scripts):
    # A point whose hot_load is 0 is the saturating model under the label and cache key earlier runs wrote; a
    # contention point adds its three terms to both.
    validate, _ = scripts
    row = {"device": "NVIDIA H100 80GB HBM3", "task": "matmul", "case": {"m": 64}, "order": "row_major",
           "occupancy": 2}
    old = (0.2, 0.0, 0.0, 0.1, 0.5, 0.25, 0.02, 1.0)
    saturating = (*old, 0.0, 0.0, 0.0)
    contention = (*old, 0.02, 8.0, 2.0)
    assert validate.point_label(saturating) == validate.point_label(old) == "0.2,l0.1,g0.5,s0.25,m0.02"
    assert validate.cache_key(row, saturating) == validate.cache_key(row, old)
    assert validate.point_label(contention) == "0.2,l0.1,g0.5,s0.25,m0.02,a0.02,o8.0,j2.0"
    assert validate.cache_key(row, contention) != validate.cache_key(row, saturating)
    assert validate.contention_of(contention) == (0.02, 8.0, 2.0) and validate.contention_of(saturating) is None
    assert validate.effective(contention, False) == (0.2, 0.0, 0.0, 0.1, 0.0, 0.25, 0.02, 1.0, 0.02, 8.0, 2.0)
    # program_cv (the 13th field) 0 keeps the label and key of the point without it; any other value adds its own.
    paged, own, off = (*contention, 0.0), (*contention, 0.0, 0.02), (*contention, 0.0, 0.0)
    assert validate.point_label(off) == validate.point_label(paged) == validate.point_label(contention)
    assert validate.cache_key(row, off) == validate.cache_key(row, contention)
    assert validate.point_label(own) == "0.2,l0.1,g0.5,s0.25,m0.02,a0.02,o8.0,j2.0,q0.02"
    assert validate.cache_key(row, own) != validate.cache_key(row, contention)
    assert validate.program_cv_of(own) == 0.02 and validate.program_cv_of((*old, 0.0, 0.0, 0.0, 0.0, 0.02)) == 0.0


def test_the_targets_loss_weighs_hit_and_dram_errors_by_their_targets(scripts):
    # Hit errors 1 and 3 pp (MAE 2 over the 3 pp target) and DRAM errors 10% and 30% (mean 20% over the 10% target).
    validate, _ = scripts
    point = (0.2, 0.0, 0.0, 0.1, 0.5, 0.25, 0.02, 1.0)
    label = validate.point_label(point)
    rows = [{"measured_l2_hit_pct": 50.0, "measured_dram_read_bytes": 100.0,
             "predictions": {label: {"l2_hit_pct": 51.0, "dram_read_bytes": 110.0}}},
            {"measured_l2_hit_pct": 60.0, "measured_dram_read_bytes": 200.0,
             "predictions": {label: {"l2_hit_pct": 57.0, "dram_read_bytes": 140.0}}}]
    assert validate.fit_loss(rows, point, "hit") == pytest.approx(2.0)
    assert validate.fit_loss(rows, point, "targets") == pytest.approx(2.0 / 3.0 + 0.2 / 0.1)


def test_a_grid_of_model_runs_each_gpu_at_its_own_gpc_share(scripts, tmp_path):
    # --gpc-grid model: every row at its GPU model's share (hw), labelled "model"; it runs what the explicit share
    # runs, so both share one cache entry, and a model whose layout changes gets new keys. Bad grids are refused.
    validate, _ = scripts
    h100 = {"device": "NVIDIA H100 80GB HBM3", "task": "matmul", "case": {"m": 64}, "order": "row_major",
            "occupancy": 2}
    h200 = h100 | {"device": "NVIDIA H200"}
    point = (0.3, 0.0, 0.0, 0.1, validate.MODEL_GPC, 0.3, 0.02, 1.0)
    assert validate.point_label(point) == "0.3,l0.1,gmodel,s0.3,m0.02"
    assert (validate.row_gpc_bound(h100, validate.MODEL_GPC), validate.row_gpc_bound(h200, validate.MODEL_GPC)) \
        == (0.35, 0.05)
    explicit = (0.3, 0.0, 0.0, 0.1, 0.35, 0.3, 0.02, 1.0)
    assert validate.cache_key(h100, point) == validate.cache_key(h100, explicit)
    assert validate.cache_key(h200, point) != validate.cache_key(h200, explicit)
    measured = tmp_path / "rows.json"
    measured.write_text('{"device": "NVIDIA H100 80GB HBM3", "rows": []}')
    for grid in ("modl", "1.0", "-0.5"):
        with pytest.raises(SystemExit, match="--gpc-grid"):
            validate_cli.main([str(tmp_path / "out.json"), str(measured), "--gpc-grid", grid])


def test_case_summary_counts_given_pairs_as_ties(scripts):
    validate, _ = scripts

    def row(order, pred, meas):
        return {"order": order, "predicted_l2_hit_pct": 50.0, "measured_l2_hit_pct": 50.0,
                "predicted_dram_read_bytes": pred, "measured_dram_read_bytes": meas}

    rows = [row("a", 1.0e9, 1.2e9), row("b", 1.1e9, 1.0e9), row("c", 2.0e9, 2.0e9)]  # a-b reversed, the rest right
    strict = validate.case_summary(rows)["kendall_tau_dram_read"]
    assert (strict["pairs"], strict["discordant"]) == (3, 1)
    tied = validate.case_summary(rows, dram_ties=frozenset({frozenset(("b", "a"))}))["kendall_tau_dram_read"]
    assert (tied["pairs"], tied["discordant"], tied["measured_ties"], tied["tau"]) == (2, 0, 1, 1.0)


def test_a_case_below_the_tau_target_says_whether_its_misranks_are_beyond_the_resolution(scripts):
    # Three orders: a and b measured 10% apart in DRAM reads and predicted 1% apart the wrong way (within the 2%
    # resolution: a pair only a measurement can order); c far from both and ranked right. tau (1 - 2) / 3 < 0.8, and
    # the one misranked pair is within the resolution. Predicting b 5% below a instead puts the miss beyond it.
    validate, _ = scripts

    def row(order, pred, meas):
        return {"order": order, "predicted_l2_hit_pct": 50.0, "measured_l2_hit_pct": 50.0,
                "predicted_dram_read_bytes": pred, "measured_dram_read_bytes": meas}

    close = validate.case_summary([row("a", 101.0, 100.0), row("b", 100.0, 110.0), row("c", 200.0, 200.0)])
    assert close["kendall_tau_dram_read"]["tau"] == pytest.approx(1 / 3)
    assert [p["within_resolution"] for p in close["kendall_tau_dram_read"]["discordant_pairs"]] == [True]
    assert validate.below_target(close) == ["dram_read"] and not validate.misranked_beyond_resolution(close)
    far = validate.case_summary([row("a", 105.0, 100.0), row("b", 100.0, 110.0), row("c", 200.0, 200.0)])
    assert validate.misranked_beyond_resolution(far)
