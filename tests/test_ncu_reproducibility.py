"""benchmarks/sim_validation/ncu_reproducibility.py (rule 5, stop 40): ncu's own runs and the model scored per case
on the same yardstick, by halving a case's runs or against a fresh run of every row."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim_validation import ncu_reproducibility

ORDERS = ("row_major", "column_major", "grouped:GROUP_M=8")


@pytest.fixture(scope="module")
def nr():
    return ncu_reproducibility


def _row(order: str, predicted: tuple[float, float], hits: list[float], reads: list[float],
         device: str = "NVIDIA H100 80GB HBM3", part: str = "held_out") -> dict:
    return {"task": "matmul", "case": {"seed": 1, "m": 64, "n": 64, "k": 64}, "order": order, "device": device,
            "set": part, "predicted_l2_hit_pct": predicted[0], "predicted_dram_read_bytes": predicted[1],
            "measured_runs": len(hits), "measured_l2_hit_pct_runs": hits, "measured_dram_read_bytes_runs": reads,
            "measured_l2_hit_pct": sum(hits) / len(hits), "measured_dram_read_bytes": sum(reads) / len(reads),
            "measured_noise_pp": 0.2}

def _four_runs(mean: float, sd: float = 4.0) -> list[float]:
    """Four runs about `mean` whose sd (ddof 1) is `sd`: a mean of them has a standard error of sd / 2."""
    steps = (1.5, 0.5, -0.5, -1.5)
    scale = sd / (sum(x * x for x in steps) / 3) ** 0.5
    return [mean + scale * x for x in steps]


def _close_pair() -> list[dict]:
    """Two orders 2.5% apart in DRAM reads (standard error 2 each, moving together run by run), hit rates alike in
    every run; the model predicts them the other way round."""
    return [_row("row_major", (50.0, 200.0), [50.0] * 4, _four_runs(100.0)),
            _row("column_major", (50.0, 100.0), [50.0] * 4, _four_runs(102.5))]


def _fresh(order: str, hit: float, read: float, device: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {"task": "matmul", "case": {"seed": 1, "m": 64, "n": 64, "k": 64}, "order": order, "device": device,
            "measured_l2_hit_pct": hit, "measured_dram_read_bytes": read}


def test_halvings_cover_every_way_and_stop_at_eight_runs(nr):
    assert len(nr.halves(3)) == 3 and all(len(a) == 1 and len(b) == 2 for a, b in nr.halves(3))
    assert len(nr.halves(4)) == 6
    assert len(nr.halves(43)) == 70  # C(8, 4): the first 8 runs
    for first, rest in nr.halves(6):
        assert sorted(first + rest) == list(range(6))


def test_split_scores_ncu_halves_and_the_model_against_the_other_half(nr):
    # ncu's runs agree with each other in every run; the model has the orders backwards.
    rows = [_row("row_major", (90.0, 1e8), [50.0, 50.5, 49.5, 50.2], [3e9, 3.05e9, 2.95e9, 3e9]),
            _row("column_major", (70.0, 2e8), [70.0, 70.4, 69.8, 70.1], [2e9, 2.02e9, 1.98e9, 2e9]),
            _row("grouped:GROUP_M=8", (50.0, 3e8), [85.0, 85.3, 84.9, 85.2], [1e9, 1.01e9, 0.99e9, 1e9])]
    result = nr.split_case(rows)
    assert result["halvings"] == 6
    assert result["ncu_half_below_share"] == 0.0
    assert result["model_below_share"] == 1.0
    table = nr.split(rows)["expected_cases_below_tau_target"]["held_out"]
    assert table == {"cases": 1, "ncu_half": 0.0, "model": 1.0}


def test_split_skips_a_case_measured_once(nr):
    assert nr.split_case([_row(o, (50.0, 1e9), [50.0], [1e9]) for o in ORDERS]) is None


def test_replicate_scores_model_and_table_means_against_the_fresh_run(nr):
    # The table's ncu means have row/column swapped against the fresh run; the model has them as the fresh run.
    table = [_row("row_major", (60.0, 2.5e9), [70.0, 70.2], [2.0e9, 2.0e9]),
             _row("column_major", (70.0, 2.0e9), [60.0, 60.1], [2.5e9, 2.5e9]),
             _row("grouped:GROUP_M=8", (85.0, 1e9), [85.0, 85.1], [1e9, 1e9])]
    fresh = [_fresh("row_major", 59.0, 2.6e9), _fresh("column_major", 71.0, 1.9e9),
             _fresh("grouped:GROUP_M=8", 86.0, 1.0e9)]
    result = nr.replicate(table, fresh)
    held = result["cases_below_tau_target"]["held_out"]
    assert (held["n_model"], held["n_ncu"], held["scored_cases"]) == (0, 1, 1)
    assert result["verdict"] == "the model ranks orders as reproducibly as ncu itself"
    case = next(iter(result["cases"].values()))
    assert case["ncu"]["below"] == ["hit", "dram_read"] and case["model"]["below"] == []
    # The converse: with the table's means as the truth, the fresh run and the model (which agree) are both below.
    converse = result["converse"]["held_out"]
    assert (converse["n_fresh_run_against_table_means"], converse["n_model_against_table_means"]) == (1, 1)
    # A fresh run that agrees with the table's means instead: now the model is the one below, and ncu wins.
    fresh_agreeing = [_fresh("row_major", 71.0, 1.9e9), _fresh("column_major", 59.0, 2.6e9),
                      _fresh("grouped:GROUP_M=8", 86.0, 1.0e9)]
    assert nr.replicate(table, fresh_agreeing)["verdict"] == "ncu ranks orders more reproducibly than the model"


def test_replicate_leaves_out_a_case_with_an_order_not_measured_and_refuses_two_runs(nr):
    table = [_row(o, (50.0 + i, 1e9 * (i + 1)), [50.0 + i], [1e9 * (i + 1)]) for i, o in enumerate(ORDERS)]
    result = nr.replicate(table, [_fresh("row_major", 50.0, 1e9), _fresh("column_major", 51.0, 2e9)])
    assert result["left_out"] == ["held_out | NVIDIA H100 80GB HBM3 | matmul m=64 n=64 k=64"]
    assert result["cases"] == {}
    with pytest.raises(SystemExit, match="two fresh runs"):
        nr.replicate(table, [_fresh("row_major", 50.0, 1e9), _fresh("row_major", 50.0, 1e9)])


def test_floor_a_perfect_model_fails_as_often_as_the_noise_flips_a_pair(nr):
    from scipy.stats import norm
    # Two orders 2.5% apart in DRAM reads, each mean with a standard error of 2 (sd 4 over 4 runs); hit rates alike in
    # every run, so only the DRAM pair can fail. The perfect model predicts the means: it is discordant when a drawn
    # table turns the pair round by more than the 2% tie, P(N(2.5, sqrt(8)) < -2% of the larger).
    rows = _close_pair()
    result = nr.floor_draws(rows, None, 4000, 1, with_model=True)
    expected = norm.cdf((-0.02 * 102.5 - 2.5) / 8 ** 0.5)
    (share,) = result["cases"].values()
    assert abs(share["perfect_below_share"] - expected) < 0.012, (share, expected)
    # The model has the pair backwards: below whenever the drawn pair is not a tie.
    assert share["model_below_share"] > 0.5
    group = result["groups"]["held_out"]
    assert group["perfect_p_all"] == pytest.approx(1 - share["perfect_below_share"])
    # Deep enough, the draws stop flipping the pair.
    deep = nr.floor_draws(rows, 256, 4000, 1, with_model=False)["groups"]["held_out"]
    assert deep["perfect_p_all"] == 1.0 and deep["perfect_expected_cases_below"] == 0.0


def test_floor_prices_the_missing_runs_and_takes_the_registered_decision(nr):
    rows = [_row(o, (50.0, 1e9 * (i + 1)), [50.0, 50.1, 49.9, 50.0], [1e9 * (i + 1)] * 3 + [1e9 * (i + 1) + 1])
            for i, o in enumerate(ORDERS)]
    seconds = nr.missing_run_seconds(rows, 8)
    assert seconds == {"NVIDIA H100 80GB HBM3": pytest.approx(3 * 4 * 540 / 126)}
    result = nr.floor(rows, draws=200, depths=(8,))
    assert result["today"]["groups"]["held_out"]["perfect_p_all"] == 1.0
    assert result["decision"].startswith("open")


def test_floor_beside_the_rule_deepens_only_the_case_that_flips(nr):
    # Case A (m=64): two orders 2.5% apart with a standard error of 2 each: flips often enough to sink P_all at 4
    # runs. Case B (m=128): the same orders 50% apart: never flips. The targeted deepening should touch A alone.
    noisy = _close_pair()
    steady = [dict(r, case={"seed": 1, "m": 128, "n": 64, "k": 64}) for r in (
        _row("row_major", (50.0, 100.0), [50.0] * 4, [100.0, 100.1, 99.9, 100.0]),
        _row("column_major", (50.0, 150.0), [50.0] * 4, [150.0, 150.1, 149.9, 150.0]))]
    result = nr.floor(noisy + steady, draws=2000, depths=(8, 64))
    assert result["today"]["groups"]["held_out"]["perfect_p_all"] < 0.99
    # A P_all the noisy case misses at 4 runs and clears deeper.
    tgt = nr.targeted(noisy + steady, result["today"], result["deeper"], 0.99)
    assert tgt["reached"] and list(tgt["cases"]) == ["held_out | NVIDIA H100 80GB HBM3 | matmul m=64 n=64 k=64"]
    (deepened,) = tgt["cases"].values()
    assert tgt["device_s"] > 0 and tgt["device_s"] == pytest.approx(nr.case_seconds(noisy, deepened["depth"]))


def test_floor_paired_draws_keep_what_a_case_s_orders_share(nr):
    # Both orders move together from run to run (one chip per run index): their difference never changes, so a
    # paired draw never turns the pair round, where drawing each row on its own does.
    rows = _close_pair()
    alone = nr.floor_draws(rows, None, 2000, 1, with_model=False)["groups"]["held_out"]
    paired = nr.floor_draws(rows, None, 2000, 1, with_model=False, paired=True)["groups"]["held_out"]
    assert alone["perfect_p_all"] < 0.99 and paired["perfect_p_all"] == 1.0
    # The paired draw has the runs' own spread over the depth: sd of a mean of 4 runs of sd 4 is 2.
    means = nr.paired_draws(np.random.default_rng(0), np.array([_four_runs(100.0)]), 4, 20000)
    assert abs(means[:, 0].std() - 2.0) < 0.05 and abs(means[:, 0].mean() - 100.0) < 0.05
