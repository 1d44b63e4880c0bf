"""Timing statistics on synthetic samples (CPU): the sem stop rule, the budget stop, the speedup CI, and the
one-line NoGpuError without CUDA. Samples are drawn from seeded generators, never constants.
"""

import math

import numpy as np
import pytest

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.runtime import cuda_available
from swizzlelab.harness.timing import (
    NO_GPU_MESSAGE,
    bootstrap_ratio_ci,
    collect_pairs,
    collect_samples,
    compare_interleaved,
    compare_samples,
    geometric_mean,
    next_batch_size,
    ratio_ci,
    ratio_ci_unpaired,
    sem_target_reached,
    summarize,
    time_fn,
)


class FakeClock:
    """A clock that advances by `per_sample_s` for each sample the fake runner produces."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def normal_runner(rng, mean_ms, rel_sd, clock=None, per_sample_s=0.0):
    def run_batch(k):
        if clock is not None:
            clock.now += k * per_sample_s
        return list(rng.normal(mean_ms, rel_sd * mean_ms, size=k))

    return run_batch


def test_sem_rule_stops_when_the_target_is_reached():
    rng = np.random.default_rng(1)
    samples, stopped_by = collect_samples(normal_runner(rng, 2.0, 0.01), budget_s=1e9, rel_sem_target=1e-3)
    assert stopped_by == "sem"
    rel_sem = np.std(samples, ddof=1) / math.sqrt(len(samples)) / np.mean(samples)
    assert rel_sem < 1e-3
    # sd 1% needs about (0.01 / 0.001)^2 = 100 samples; batches overshoot by at most ~50%
    assert 60 <= len(samples) <= 200


def test_budget_stops_a_noisy_kernel():
    rng = np.random.default_rng(2)
    clock = FakeClock()
    run = normal_runner(rng, 1.0, 0.5, clock, per_sample_s=0.01)
    samples, stopped_by = collect_samples(run, budget_s=1.0, rel_sem_target=1e-3, clock=clock)
    assert stopped_by == "budget"
    assert 90 <= len(samples) <= 160  # ~1 s / 0.01 s per sample, plus at most one batch


def test_min_reps_always_collected_and_max_reps_respected():
    rng = np.random.default_rng(3)
    clock = FakeClock()
    samples, _ = collect_samples(normal_runner(rng, 1.0, 0.5, clock, 10.0), budget_s=0.001, min_reps=7, clock=clock)
    assert len(samples) == 7
    samples, stopped_by = collect_samples(normal_runner(rng, 1.0, 0.5), budget_s=1e9, max_reps=50)
    assert stopped_by == "max_reps" and len(samples) == 50


def test_next_batch_size_respects_the_budget():
    assert next_batch_size(0, 0.0, 10.0, 10, 1000) == 10
    assert next_batch_size(100, 1.0, 10.0, 10, 1000) == 50
    assert next_batch_size(100, 9.9, 10.0, 10, 1000) == 1  # 0.1 s left at 0.01 s per rep fits ~10; never 0
    assert next_batch_size(1000, 1.0, 10.0, 10, 1000) == 0


def test_sem_target_needs_min_reps():
    rng = np.random.default_rng(4)
    tight = rng.normal(1.0, 1e-6, size=5)
    assert not sem_target_reached(tight, 1e-3, min_reps=10)
    assert sem_target_reached(rng.normal(1.0, 1e-6, size=10), 1e-3, min_reps=10)


def test_summarize_fields():
    rng = np.random.default_rng(5)
    samples = rng.normal(3.0, 0.1, size=40)
    timing = summarize(samples, "sem", device="TestGPU")
    assert timing.n == 40 and timing.best_ms == samples.min() and timing.worst_ms == samples.max()
    assert timing.mean_ms == pytest.approx(samples.mean())
    assert timing.sem_ms == pytest.approx(samples.std(ddof=1) / math.sqrt(40))
    assert timing.label == "measured (TestGPU)"
    assert "samples_ms" not in timing.to_dict(with_samples=False)


def test_ratio_ci_detects_a_real_speedup_and_not_a_null_one():
    rng = np.random.default_rng(6)
    a = rng.normal(1.10, 0.01, size=200)
    b = rng.normal(1.00, 0.01, size=200)
    comparison = compare_samples(a, b, "sem")
    assert comparison.speedup == pytest.approx(1.10, abs=0.01)
    assert comparison.ci_high - comparison.ci_low < 0.01
    assert comparison.is_improvement and not comparison.is_regression
    same_a = rng.normal(1.0, 0.02, size=200)
    same_b = rng.normal(1.0, 0.02, size=200)
    null = compare_samples(same_a, same_b, "sem")
    assert null.ci_low < 1.0 < null.ci_high
    assert not null.is_improvement
    slower = compare_samples(b, a, "sem")
    assert slower.is_regression and not slower.is_improvement


def test_ratio_ci_coverage_is_about_95_percent():
    rng = np.random.default_rng(7)
    true_ratio = 1.05
    hits = 0
    trials = 400
    for _ in range(trials):
        drift = rng.normal(0.0, 0.02, size=60)  # shared by A and B of a pair: the pairing cancels it
        a = true_ratio * (1.0 + drift) + rng.normal(0, 0.01, size=60)
        b = (1.0 + drift) + rng.normal(0, 0.01, size=60)
        _, low, high = ratio_ci(a, b)
        hits += low <= true_ratio <= high
    assert 0.90 <= hits / trials <= 0.99


def test_pairing_narrows_the_interval_under_shared_drift():
    rng = np.random.default_rng(8)
    drift = np.cumsum(rng.normal(0, 0.01, size=300)) + 2.0
    a = 1.02 * drift + rng.normal(0, 0.001, size=300)
    b = drift + rng.normal(0, 0.001, size=300)
    _, low, high = ratio_ci(a, b)
    _, low_unpaired, high_unpaired = ratio_ci(a, rng.permutation(b))
    assert (high - low) < 0.2 * (high_unpaired - low_unpaired)
    assert low > 1.0


def test_delta_method_agrees_with_bootstrap():
    rng = np.random.default_rng(9)
    a = rng.normal(2.0, 0.05, size=300)
    b = rng.normal(1.6, 0.05, size=300)
    _, low, high = ratio_ci(a, b)
    _, boot_low, boot_high = bootstrap_ratio_ci(a, b, n_boot=3000, seed=1)
    assert low == pytest.approx(boot_low, abs=0.01) and high == pytest.approx(boot_high, abs=0.01)


def test_collect_pairs_stops_on_both_sems():
    rng = np.random.default_rng(10)

    def run_pairs(k):
        return list(rng.normal(1.0, 0.005, size=k)), list(rng.normal(2.0, 0.03, size=k))

    a, b, stopped_by = collect_pairs(run_pairs, budget_s=1e9, rel_sem_target=1e-3)
    assert stopped_by == "sem" and len(a) == len(b)
    # B (1.5% sd) needs ~225 pairs; A alone would have stopped after ~25
    assert len(a) >= 200


def test_geometric_mean():
    values = [1.0, 4.0, 16.0]
    assert geometric_mean(values) == pytest.approx(4.0)
    with pytest.raises(Exception):
        geometric_mean([1.0, 0.0])


@pytest.mark.skipif(cuda_available(), reason="checks the CPU-only error")
def test_timing_without_cuda_is_one_line_no_gpu_error():
    with pytest.raises(NoGpuError) as info:
        time_fn(lambda data: data, {})
    assert str(info.value) == NO_GPU_MESSAGE
    with pytest.raises(NoGpuError):
        compare_interleaved(lambda d: d, lambda d: d, {}, {})


def _mm_data(size, seed):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((size, size), generator=gen, device="cuda", dtype=torch.float16)
    b = torch.randn((size, size), generator=gen, device="cuda", dtype=torch.float16)
    return {"a": a, "b": b, "out": torch.empty((size, size), device="cuda", dtype=torch.float16)}


@pytest.mark.gpu
def test_time_fn_on_gpu_checks_output_after_timing():
    import torch

    data = _mm_data(2048, 1)
    expected = data["a"].float() @ data["b"].float()

    def check(output):
        return bool(torch.allclose(output.float(), expected, rtol=2e-2, atol=2e-1))

    timing = time_fn(lambda d: torch.mm(d["a"], d["b"], out=d["out"]), data, budget_s=1.0, check=check)
    assert timing.n >= 10 and 0 < timing.best_ms <= timing.mean_ms <= timing.worst_ms
    assert timing.device and timing.check_after


@pytest.mark.gpu
def test_compare_interleaved_on_gpu_sees_a_four_times_smaller_matmul():
    import torch

    big, small = _mm_data(4096, 2), _mm_data(2048, 3)

    def mm(d):
        return torch.mm(d["a"], d["b"], out=d["out"])

    comparison = compare_interleaved(mm, mm, big, small, budget_s=2.0)
    assert comparison.is_improvement and comparison.speedup > 3.0


def test_t_quantiles_match_tables_and_widen_small_samples():
    from swizzlelab.harness.timing import Z_95, t_quantile_975

    table = {1: 12.706, 2: 4.303, 3: 3.182, 5: 2.571, 9: 2.262, 29: 2.045, 100: 1.984}  # standard t tables
    for df, value in table.items():
        assert t_quantile_975(df) == pytest.approx(value, abs=2e-3)
    rng = np.random.default_rng(10)
    a, b = rng.normal(1.1, 0.02, size=10), rng.normal(1.0, 0.02, size=10)
    ratio, low, high = ratio_ci(a, b)
    _, z_low, z_high = ratio_ci(a, b, confidence_z=Z_95)
    assert (high - low) / (z_high - z_low) == pytest.approx(t_quantile_975(9) / Z_95)


def test_unpaired_ratio_ci_covers_the_true_ratio_and_widens_with_noise():
    rng = np.random.default_rng(3)
    library = 15.0 + rng.normal(0, 0.15, 40)  # e.g. cuDNN in the parent
    submission = 14.0 + rng.normal(0, 0.15, 60)  # the isolated child's samples
    ratio, low, high = ratio_ci_unpaired(library, submission)
    assert low < 15.0 / 14.0 < high and abs(ratio - 15.0 / 14.0) < 0.01
    noisy = 14.0 + rng.normal(0, 1.5, 60)
    _, low2, high2 = ratio_ci_unpaired(library, noisy)
    assert high2 - low2 > 3 * (high - low)
    with pytest.raises(UserError):
        ratio_ci_unpaired(library, submission[:1])
