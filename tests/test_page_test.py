"""benchmarks/sim_validation/page_test.py's registered rule (stop 38): page noise wins on the page set by fewer tau
misses, then by the lower targets loss, and is adopted only if it also stays within the issue's targets there."""

from __future__ import annotations

import pytest

from benchmarks.sim_validation import page_test as page_test_script


@pytest.fixture(scope="module")
def page_test():
    return page_test_script


def _s(misses: int, loss: float, mae: float = 2.0, dram: float = 0.05) -> dict:
    return {"tau_misses": misses, "targets_loss": loss, "mae_l2_hit_pp": mae, "mean_rel_error_dram_read": dram}


def test_fewer_misses_win_and_are_adopted_within_targets(page_test):
    assert page_test.decide({"off": _s(3, 0.5), "on": _s(1, 0.9)}) == ("on", True, True)


def test_equal_misses_go_to_the_lower_loss(page_test):
    assert page_test.decide({"off": _s(2, 0.5), "on": _s(2, 0.6)}) == ("off", True, False)
    assert page_test.decide({"off": _s(2, 0.7), "on": _s(2, 0.6)}) == ("on", True, True)


def test_a_win_outside_the_targets_is_not_adopted(page_test):
    assert page_test.decide({"off": _s(3, 0.5), "on": _s(1, 1.5, dram=0.12)}) == ("on", False, False)
    assert page_test.decide({"off": _s(3, 0.5), "on": _s(1, 1.5, mae=3.2)}) == ("on", False, False)


def test_the_page_set_keys_are_the_registered_cases(page_test):
    keys = page_test.page_keys()
    assert len(keys) == 6 and all(key.startswith("matmul ") for key in keys)
    assert "matmul m=14336 n=14336 k=4096" in keys


def test_the_pace_set_keys_are_its_own_registered_cases(page_test):
    keys = page_test.page_keys("pace")
    assert len(keys) == 6 and "matmul m=11264 n=11264 k=4096" in keys and not keys & page_test.page_keys("page")
