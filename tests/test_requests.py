"""The shared timed-request loop (harness.requests) on the CPU: the host clock stands in for CUDA events, the
task's real check judges the outputs, so honest kernels pass and caching or late-breaking ones are caught."""

from __future__ import annotations

import random

import pytest
import torch

from swizzlelab.errors import UserError
from swizzlelab.harness.timers import HostClock
from swizzlelab.harness.requests import (
    MAX_POOL,
    MAX_POOL_CPU,
    MIN_REQUESTS,
    MIN_TIMED_REPS,
    next_request_size,
    pool_size,
    stop_reason,
    time_requests,
)
from swizzlelab.tasks import load_task

CASE = {"seed": 5, "m": 24, "n": 16, "k": 8}


@pytest.fixture(scope="module")
def matmul():
    return load_task("matmul")


def honest(data):
    return torch.matmul(data["a"], data["b"], out=data["out"])


def test_honest_kernel_is_timed_on_fresh_inputs(matmul):
    seen = []

    def kernel(data):
        seen.append(float(data["a"][0, 0]))
        return honest(data)

    timing = time_requests(matmul, kernel, CASE, 5, 0.05, clock=HostClock(), rng=random.Random(1))
    assert timing.n >= MIN_TIMED_REPS and timing.n == len(timing.samples_ms)
    assert timing.stopped_by in ("sem", "budget") and timing.mean_ms > 0
    assert "all 384 elements match" in timing.check_after
    # Every call saw an input set of its own seed: first elements repeat only by chance.
    assert len(set(seen)) > 0.9 * len(seen)


def test_a_kernel_returning_a_new_tensor_is_copied_into_out(matmul):
    timing = time_requests(matmul, lambda d: d["a"] @ d["b"], CASE, 6, 0.02, clock=HostClock(), rng=random.Random(2))
    assert timing.n >= MIN_TIMED_REPS


def test_caching_by_shape_is_refused(matmul):
    cache = {}

    def cached(data):
        key = tuple(data["a"].shape)
        if key not in cache:
            cache[key] = honest(data).clone()
        data["out"].copy_(cache[key])
        return data["out"]

    with pytest.raises(UserError, match="output wrong"):
        time_requests(matmul, cached, CASE, 7, 0.05, clock=HostClock(), rng=random.Random(3))


def test_a_kernel_that_breaks_late_is_refused(matmul):
    calls = [0]

    def breaks(data):
        calls[0] += 1
        honest(data)
        if calls[0] > 30:
            data["out"].zero_()
        return data["out"]

    with pytest.raises(UserError, match="output wrong"):
        time_requests(matmul, breaks, CASE, 8, 0.05, clock=HostClock(), rng=random.Random(4))


def test_wrong_shape_is_a_one_line_error(matmul):
    with pytest.raises(UserError, match="expected a tensor of shape"):
        time_requests(matmul, lambda d: d["a"], CASE, 9, 0.02, clock=HostClock(), rng=random.Random(5))


def test_pool_size_respects_memory_and_bounds():
    assert pool_size(1 << 20, on_gpu=False) == MAX_POOL_CPU
    assert pool_size(1 << 20, on_gpu=True, gpu_memory_bytes=80 << 30) == MAX_POOL
    # 1 GiB per set on an 80 GiB card: a fifth of its memory holds 16 sets.
    assert pool_size(1 << 30, on_gpu=True, gpu_memory_bytes=80 << 30) == 16
    assert pool_size(64 << 30, on_gpu=True, gpu_memory_bytes=80 << 30) == 2


def test_request_sizes_cover_every_size_each_round():
    rng, design = random.Random(0), []
    first = sorted(next_request_size(design, rng, 5) for _ in range(5))
    second = sorted(next_request_size(design, rng, 5) for _ in range(5))
    assert first == second == [1, 2, 3, 4, 5]


def test_stop_rule():
    steady = [1.0] * 40
    assert stop_reason(MIN_REQUESTS - 1, steady, 4, 99.0, 1.0) is None
    assert stop_reason(MIN_REQUESTS, steady, 4, 0.0, 1.0) == "sem"
    noisy = [1.0, 3.0] * 20
    assert stop_reason(MIN_REQUESTS, noisy, 4, 0.5, 1.0) is None
    assert stop_reason(MIN_REQUESTS, noisy, 4, 1.5, 1.0) == "budget"
    # "sem" waits until every request size has run once.
    assert stop_reason(MIN_REQUESTS, steady, MIN_REQUESTS + 1, 0.0, 1.0) is None


@pytest.mark.gpu
def test_request_loop_on_the_gpu_times_real_work(matmul):
    """CUDA events through the shared loop: an 8x larger matmul takes several times longer, and the figure
    carries the GPU's name and its SM clock over the timed phase."""
    small = time_requests(matmul, honest, {"seed": 1, "m": 1024, "n": 1024, "k": 1024}, 1, 0.5)
    large = time_requests(matmul, honest, {"seed": 2, "m": 2048, "n": 2048, "k": 2048}, 2, 0.5)
    assert small.device == large.device == torch.cuda.get_device_name(0)
    assert small.n >= MIN_TIMED_REPS and large.n >= MIN_TIMED_REPS
    assert 3.0 < large.mean_ms / small.mean_ms < 12.0
    assert "elements match" in large.check_after
    # nvidia-smi samples the clock where it exists; without it the figure says nothing rather than a guess.
    assert large.gpu_clock is None or "sm_mhz_mean" in large.gpu_clock


@pytest.mark.gpu
def test_request_loop_on_the_gpu_refuses_a_cached_result(matmul):
    cache = {}

    def cached(data):
        if "out" not in cache:
            cache["out"] = honest(data).clone()
        data["out"].copy_(cache["out"])
        return data["out"]

    with pytest.raises(UserError, match="output wrong"):
        time_requests(matmul, cached, {"seed": 3, "m": 512, "n": 512, "k": 512}, 3, 0.3)
