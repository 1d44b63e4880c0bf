"""benchmarks/sim_validation/placement_probe.py's registered rule: a pair is placement-bound only when placements
differ (ANOVA p < 0.05) and lie on both sides of zero beyond their own noise; and the operand layouts it measures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.sim_validation import chip_study, layout_mirror, placement_probe


@pytest.fixture(scope="module")
def probe():
    return placement_probe


def _doc(gap_by_placement: list[float], noise: float, seed: int = 0) -> dict:
    """Rows of one case, two orders, 2 launches per placement: row-major reads (1 + gap) x column-major's bytes."""
    rng = np.random.default_rng(seed)
    rows = []
    for placement, gap in enumerate(gap_by_placement):
        for launch in range(2):
            base = 1e9 * (1 + rng.normal(0, noise))
            for order, factor in (("row_major", 1 + gap + rng.normal(0, noise)), ("column_major", 1.0)):
                rows.append({"case": {"m": 64, "n": 64, "k": 32}, "order": order, "placement": placement,
                             "process": 0, "launch": launch, "measured_dram_read_bytes": base * factor,
                             "measured_l2_hit_pct": 50.0 + rng.normal(0, 0.2)})
    return {"rows": rows}


def test_a_pair_whose_sign_follows_the_placement_is_placement_bound(probe):
    result = probe.analyse(_doc([0.08, -0.08, 0.07, -0.09, 0.08, -0.07], noise=0.005))
    dram = result["64x64x32 row_major - column_major dram"]
    assert dram["anova_p_over_placements"] < 0.05 and dram["sign_changes_beyond_noise"]
    assert dram["placement_bound"]
    assert not result["64x64x32 row_major - column_major hit"]["placement_bound"]


def test_a_gap_that_varies_but_keeps_its_sign_is_not(probe):
    dram = probe.analyse(_doc([0.02, 0.10, 0.05, 0.12, 0.03, 0.09], noise=0.003))[
        "64x64x32 row_major - column_major dram"]
    assert dram["anova_p_over_placements"] < 0.05  # the placements differ, but never change the order
    assert not dram["placement_bound"]


def test_a_sign_change_within_the_noise_is_not(probe):
    dram = probe.analyse(_doc([0.004, -0.004, 0.003, -0.003, 0.004, -0.002], noise=0.02, seed=3))[
        "64x64x32 row_major - column_major dram"]
    assert not dram["sign_changes_beyond_noise"] and not dram["placement_bound"]


def test_the_layouts_keep_the_values_and_swap_the_strides(probe):
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    for layout, strides in (("default", ((4, 1), (5, 1))), ("b_kmajor", ((4, 1), (1, 4))),
                            ("mirror", ((1, 6), (1, 4)))):
        out = probe.relayout({"a": a, "b": b, "out": torch.empty(6, 5)}, layout)
        assert (out["a"].stride(), out["b"].stride()) == strides
        assert torch.equal(out["a"], a) and torch.equal(out["b"], b)


def test_layout_mirror_default_arm_is_the_tasks_trace_and_the_mirror_only_moves_lines():
    from swizzlelab.tasks import load_task
    from swizzlelab.tasks.matmul import kernel

    mirror_mod = layout_mirror
    ref = load_task("matmul").access_model({"m": 512, "n": 256, "k": 256}, config=kernel.GPU_CONFIG)
    default = mirror_mod.mirrored_trace(512, 256, 256, "default")
    mirror = mirror_mod.mirrored_trace(512, 256, 256, "mirror")
    for field in ("lines", "is_write", "step_ptr", "tile_step_ptr", "sector_mask"):
        assert np.array_equal(getattr(ref, field), getattr(default, field)), field
    assert default.l2_bound and mirror.l2_bound
    assert np.array_equal(mirror.step_ptr, default.step_ptr)  # the same number of lines in every step
    # a's first step of tile 0: 128 rows of one 128-byte line by default; 64 k-rows of two lines each, mirrored
    first = slice(int(default.step_ptr[0]), int(default.step_ptr[1]))
    assert np.array_equal(np.unique(np.diff(default.lines[first][:128])), [4])  # a's rows: 512 bytes apart (k = 256)
    assert np.array_equal(np.unique(np.diff(mirror.lines[first][:128])), [1, 7])  # line pairs 8 lines apart (m = 512)
    assert not np.array_equal(mirror.lines, default.lines)


def test_chip_study_binds_a_pair_only_where_two_chips_disagree_beyond_their_noise():

    def rows(gap: float, noise: float, seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        out = []
        for launch in range(4):
            for order, value in (("row_major", 1e9 * (1 + gap + rng.normal(0, noise))), ("column_major", 1e9)):
                out.append({"case": {"m": 64, "n": 64, "k": 32}, "order": order, "placement": 0, "process": 0,
                            "launch": launch, "measured_dram_read_bytes": value, "measured_l2_hit_pct": 50.0})
        return out

    key = "H100 64x64x32 row_major - column_major dram"
    apart = chip_study.study([("a", "H100", rows(0.05, 0.005, 1)), ("b", "H100", rows(-0.05, 0.005, 2))])
    assert apart[key]["chip_bound"] and apart[key]["chips_above"] == ["a"] and apart[key]["chips_below"] == ["b"]
    alike = chip_study.study([("a", "H100", rows(0.05, 0.005, 1)), ("b", "H100", rows(0.02, 0.005, 2))])
    assert not alike[key]["chip_bound"]
    noisy = chip_study.study([("a", "H100", rows(0.01, 0.05, 1)), ("b", "H100", rows(-0.01, 0.05, 2))])
    assert not noisy[key]["chip_bound"]
