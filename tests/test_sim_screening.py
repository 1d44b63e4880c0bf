"""The search proposer's screening stops within one candidate's time of its budget, with any number of threads."""

from __future__ import annotations

import time

import pytest

from swizzlelab.optimize.search import SearchProposer, coarse_candidates

CANDIDATE_S = 0.25


def slow_screen(text: str):
    time.sleep(CANDIDATE_S)
    prediction = {"dram_bytes": len(text), "l2_hit_rate": 0.5, "dram_read_bytes": len(text), "kind": "test"}
    return f"id{hash(text)}", prediction, None, ""


@pytest.mark.parametrize("workers", [1, 3])
def test_screening_never_overshoots_its_budget_by_more_than_one_candidate(workers):
    budget = 1.0
    notes: list[str] = []
    proposer = SearchProposer(grid=(16, 16), n_domains=1, screen=slow_screen, screen_budget_s=budget,
                              workers=workers, notes=notes.append)
    cands = coarse_candidates((16, 16), 1)
    # The formula texts are built inside the budget before any candidate starts (0.1-0.2 s here); on a loaded
    # 2-core CI machine that once took a whole 0.5 s budget, so no candidate started: hence 1 s.
    assert len(cands) * CANDIDATE_S / workers > 3 * budget  # far more work than the budget allows
    started = time.perf_counter()
    done = proposer.screen_all(cands)
    elapsed = time.perf_counter() - started
    assert elapsed <= budget + CANDIDATE_S + 0.25  # slack for a loaded CI machine
    # Threads start a new candidate as soon as one finishes (not per batch): every thread did work.
    assert done >= workers * 2
    assert len(proposer.screened) == done and any("screening time" in n for n in notes)
    # Candidates are stored in sweep order (a prefix of the candidates), whatever finished first.
    assert list(proposer.screened) == [c.spec for c in cands][:done]


def _prediction(dram: int):
    from swizzlelab.optimize.records import Prediction

    return Prediction(model="test", occupancy=1, l2_hit_rate=0.5, line_hit_rate=0.5, dram_read_bytes=dram,
                      dram_write_bytes=0, compulsory_bytes=1, requested_bytes=2 * dram, best_hit_rate=0.9)


def _baseline():
    from swizzlelab.optimize.records import Attempt

    return Attempt(iteration=0, status="evaluated", proposer="baseline", label="base", formula="", hypothesis="",
                   reasoning="", summary="", why_better="", permutation_id="base")


@pytest.mark.parametrize("gain", [True, False])
def test_measuring_runs_propose_after_a_slice_and_rank_the_rest_between_measurements(gain):
    """With slice_s, the first proposal comes after one slice of the sweep while an order predicted to gain is
    ranked; with nothing predicted to gain, it keeps screening slices and stops only on the whole sweep."""
    screened: list[str] = []

    def screen(text: str):
        time.sleep(0.02)
        screened.append(text)
        return f"id{len(screened)}", _prediction(1000 - len(screened)), None, ""

    notes: list[str] = []
    proposer = SearchProposer(grid=(16, 16), n_domains=1, screen=screen, screen_budget_s=60, slice_s=0.15,
                              notes=notes.append)
    proposer.stop_rule = (lambda ranked: None) if gain else (lambda ranked: "nothing to gain")
    cands = coarse_candidates((16, 16), 1)
    base = _baseline()
    first = proposer.propose([base], base)
    if gain:
        assert first is not None and 0 < len(screened) < len(cands) // 2
        assert any("more are ranked between measurements" in n for n in notes)
        before = len(screened)
        assert proposer.propose([base], base) is not None and len(screened) > before  # the next slice
    else:
        assert first is None and proposer.stop_reason == "nothing to gain"
        assert len({t for t in screened}) >= len({c.spec for c in cands}) - 1  # the whole sweep, then the stop
        # what it would have tried next is still named (a suggestion on an idle GPU times it anyway): the
        # best-ranked untried order, the one the screen predicted fewest DRAM bytes for (the last screened here)
        (text, spec), = proposer.best_untried([base])
        assert text == screened[-1] and proposer.screened[spec].text == text
