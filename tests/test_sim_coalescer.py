"""The L2 request coalescer in the simulator: a read that joins another program's recent lookup of the same line makes
no lookup of its own (ncu does not count it), on NVIDIA models only; the DRAM traffic is the engines' own."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import domain_programs, get_model
from swizzlelab.sim import SimParams, footprint_of, simulate
from swizzlelab.sim.engines import coalesced_sectors
from swizzlelab.sim.params import L2Geometry, Progress
from swizzlelab.sim.setup import Run, trace_arrays
from tests.test_sim import SECTOR, make_trace, tiny_model

FULL = 0xF  # all four sectors of a line


def _nvidia(capacity_lines: int = 64, units: int = 2, partitions: int = 1):
    return replace(tiny_model(capacity_lines, units=units, partitions=partitions), vendor="nvidia")


def test_two_programs_reading_together_make_one_lookup():
    # Two programs on two slots read lines 0-3 in the same step (lockstep): slot 0 runs first and misses, slot 1's
    # reads join its lookups. Without the coalescer: 32 sector lookups, 16 hits (50%); with it: 16 lookups, 0 hits.
    step = [(line, FULL, False) for line in range(4)]
    trace = make_trace([[step], [step]])
    perm = np.arange(2)
    off = simulate(trace, perm, _nvidia(), SimParams(step_cv=0.0, lrc_window=0.0), occupancy=1)
    on = simulate(trace, perm, _nvidia(), SimParams(step_cv=0.0, lrc_window=0.5), occupancy=1)
    assert off.l2_hit_rate == pytest.approx(0.5)
    assert off.coalesced_bytes == 0
    assert on.coalesced_bytes == 16 * SECTOR
    assert on.l2_hit_rate == 0.0
    assert on.requested_bytes == off.requested_bytes == 32 * SECTOR
    assert on.dram_read_bytes == off.dram_read_bytes == 16 * SECTOR
    assert on.lrc_window == 0.5


def test_a_programs_own_rereads_are_separate_lookups():
    # One program reads line 0 in two consecutive steps: the hardware looks up each load (the histogram's channels).
    trace = make_trace([[[(0, FULL, False)], [(0, FULL, False)]]])
    on = simulate(trace, np.arange(1), _nvidia(units=1), SimParams(step_cv=0.0, lrc_window=5.0), occupancy=1)
    assert on.coalesced_bytes == 0
    assert on.l2_hit_rate == pytest.approx(0.5)


@pytest.mark.parametrize("window, joined", [(0.5, False), (1.0, True)])
def test_only_reads_within_the_window_join(window, joined):
    # One slot: program 1 reads line 0 one mean step time after program 0 did.
    trace = make_trace([[[(0, FULL, False)]], [[(0, FULL, False)]]])
    on = simulate(trace, np.arange(2), _nvidia(units=1), SimParams(step_cv=0.0, lrc_window=window), occupancy=1)
    assert on.coalesced_bytes == (4 * SECTOR if joined else 0)
    assert on.l2_hit_rate == pytest.approx(0.0 if joined else 0.5)


def test_writes_are_never_coalesced():
    step = [(line, FULL, True) for line in range(4)]
    trace = make_trace([[step], [step]])
    on = simulate(trace, np.arange(2), _nvidia(), SimParams(step_cv=0.0, lrc_window=1.0), occupancy=1)
    assert on.coalesced_bytes == 0


def test_each_coalesced_sector_is_one_lookup_and_one_hit_less():
    # Two partitions, drifting programs: a read joins only a lookup made from its own side, where the first reader
    # left the line, so ncu's count is the engines' less one near hit per coalesced sector. Coalescing never changes
    # DRAM traffic, requests or fabric lookups.
    rng = np.random.default_rng(3)
    tiles = [[[(int(line), FULL, False) for line in rng.choice(40, 6, replace=False)] for _ in range(5)]
             for _ in range(24)]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = _nvidia(capacity_lines=16, units=4, partitions=2)
    off = simulate(trace, perm, model, SimParams(step_cv=0.3, lrc_window=0.0), occupancy=2)
    on = simulate(trace, perm, model, SimParams(step_cv=0.3, lrc_window=0.3), occupancy=2)
    assert on.coalesced_bytes > 0
    assert (on.dram_read_bytes, on.requested_bytes, on.fabric_bytes) == (off.dram_read_bytes, off.requested_bytes,
                                                                         off.fabric_bytes)
    lookups_off = sum(d.lookup_sectors for d in off.per_domain)
    hits_off = off.l2_hit_rate * lookups_off
    coalesced = on.coalesced_bytes // SECTOR
    assert on.l2_hit_rate == pytest.approx((hits_off - coalesced) / (lookups_off - coalesced))


def test_reads_of_part_of_a_line_are_not_coalesced():
    # The narrow transpose, the histogram and spmv read single sectors: the H100 merged none of them.
    step = [(line, 0x1, False) for line in range(4)]
    trace = make_trace([[step], [step]])
    on = simulate(trace, np.arange(2), _nvidia(), SimParams(step_cv=0.0, lrc_window=1.0), occupancy=1)
    assert on.coalesced_bytes == 0
    assert on.l2_hit_rate == pytest.approx(0.5)


def test_amd_models_have_no_coalescer():
    trace = make_trace([[[(line, FULL, False) for line in range(4)]]] * 2)
    amd = replace(tiny_model(64, units=2), vendor="amd")
    on = simulate(trace, np.arange(2), amd, SimParams(step_cv=0.0, lrc_window=1.0), occupancy=1)
    assert on.coalesced_bytes == 0 and on.lrc_window == 0.0


@pytest.mark.parametrize("bad", [-0.1, "0.2", True, float("nan")])
def test_bad_windows_are_refused(bad):
    trace = make_trace([[[(0, FULL, False)]]])
    with pytest.raises(UserError, match="lrc_window"):
        simulate(trace, np.arange(1), get_model("h100"), SimParams(lrc_window=bad))


@pytest.mark.parametrize("seed", range(5))
def test_the_set_group_count_equals_the_whole_stream_count(seed):
    # The coalescer counted group by group of the set-partitioned engine's split (on threads, reads older than the
    # window forgotten) gives the serial kernel's count on random traces: full and partial reads, writes, a
    # program's own re-reads, two partitions, a random-walk schedule with ties and long gaps.
    rng = np.random.default_rng(300 + seed)
    tiles = [[[(int(rng.integers(0, 120)), int(rng.choice([FULL, FULL, FULL, 0x3])), bool(rng.random() < 0.15))
               for _ in range(int(rng.integers(1, 9)))] for _ in range(int(rng.integers(1, 8)))]
             for _ in range(int(rng.integers(20, 80)))]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = _nvidia(64, units=4, partitions=2)
    work = list(enumerate(domain_programs(perm, model)))
    n_lines = footprint_of(trace)[0]
    for window in (0.05, 0.5, 3.0):
        counts = []
        for set_map in (0, 1):  # the count does not depend on the set map
            geometry = L2Geometry(n_partitions=2, capacity=32, n_sets=8, assoc=4, set_map=set_map, pair=0)
            run = Run(model=model, trace=trace_arrays(trace), geometry=geometry,
                      progress=Progress("random_walk", step_cv=0.7, seed=seed, lrc_window=window), n_slots=8,
                      n_workers=2, n_simulated=8)
            counts += [coalesced_sectors(run, work, n_lines, FULL, grouped) for grouped in (False, True)]
        assert counts[0] > 0 or window == 0.05
        assert counts == [counts[0]] * 4
