"""Clocks for timed requests: CUDA events, the device synchronize and the L2 flush bound to builtins before any
untrusted code loads, the all-SM gate before a request; and the host clock that stands in for tests on the CPU.
"""

from __future__ import annotations

import time
from typing import Any, Callable

# Gate length: long enough that the host has enqueued the submission's kernels before the gate ends (Python,
# Triton's launcher), so launch overhead stays out of the interval as it does in-process. It grows with the calls
# of a request: back to back, a kernel shorter than its own launch (~10-40 us of host time) would otherwise be
# timed at the host's pace once the host falls behind (measured on an H100: a 1024^3 cuBLAS matmul at 0.024 ms,
# a 2048^3 one at 0.037 ms, through a fixed 80 us gate).
GATE_NS = 80_000
GATE_NS_PER_CALL = 40_000
# The calibration's stand-in call: a trusted kernel busy this long, so empty requests keep the GPU ahead of the
# host as a real kernel does and the cost around each call (its seal, event gaps) is measured as it is then.
SPIN_NS = 200_000
# Thread blocks an SM can hold at most (Hopper, Ampere: 32): the gate fills every slot, so no kernel of any
# stream can start before the start mark.
BLOCKS_PER_SM = 32
# What figures of the host clock say they were measured on.
HOST_CLOCK_DEVICE = "CPU perf_counter, Triton interpreter"


class _Clock:
    """What both clocks offer on top of their `time_calls`."""

    def time_calls(self, calls: list[Callable[[], Any]], seals: list[Callable[[], None]],
                   gate: bool = True) -> tuple[list[Any], list[float], float]:
        raise NotImplementedError

    def time_call(self, call: Callable[[], Any], gate: bool = True) -> tuple[Any, float, float]:
        """(result, start->end ms, end->after-device-sync ms) of one call, without a seal."""
        results, figures, tail = self.time_calls([call], [lambda: None], gate)
        return results[0], figures[0], tail


class TrustedClock(_Clock):
    """CUDA events, device synchronisation and the L2 flush, bound to the builtin functions before the
    submission is imported, so patching torch's Python objects does not reach them."""

    def __init__(self, torch: Any) -> None:
        base = torch._C._CudaEventBase
        self._new = base.__new__
        self._base = base
        self._record = base.record
        self._elapsed = base.elapsed_time
        self._event_sync = base.synchronize
        self._device_sync = torch._C._cuda_synchronize
        self._fill = torch._C.TensorBase.fill_
        self.stream = torch.cuda.current_stream()
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or (128 << 20)
        self.flush_buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")
        self.counter = 0
        self.gate, self.gate_kind, self.spin = make_gate(torch, int(props.multi_processor_count))
        self._reset_l2 = _persisting_l2_reset()

    def event(self) -> Any:
        return self._new(self._base, enable_timing=True)

    def flush(self) -> None:
        if self._reset_l2 is not None:
            self._reset_l2()
        self.counter = (self.counter + 1) & 0x7FFFFFFF
        self._fill(self.flush_buffer, self.counter)

    def time_calls(self, calls: list[Callable[[], Any]], seals: list[Callable[[], None]],
                   gate: bool = True) -> tuple[list[Any], list[float], float]:
        """Run `calls` back to back after one gate: per call the start->end ms of its own marks, and the
        end->after-device-sync ms of the last. After each end mark its seal (a copy of sampled output elements
        into the parent's buffer) runs in stream order, outside the figure: a call must be complete when it
        returns. E2 is recorded after a device-wide synchronize, so work left on other streams shows."""
        marks = [self.event() for _ in range(2 * len(calls))]
        after = self.event()
        self.flush()
        self._device_sync()
        if gate:
            self.gate(GATE_NS + GATE_NS_PER_CALL * len(calls))
        results = []
        for index, call in enumerate(calls):
            self._record(marks[2 * index], self.stream)
            results.append(call())
            self._record(marks[2 * index + 1], self.stream)
            seals[index]()
        self._device_sync()
        self._record(after, self.stream)
        self._event_sync(after)
        figures = [float(self._elapsed(marks[2 * i], marks[2 * i + 1])) for i in range(len(calls))]
        return results, figures, float(self._elapsed(marks[-1], after))


class HostClock(_Clock):
    """The CPU stand-in for tests of the timed flow under the interpreter: perf_counter bound before the
    submission is imported (figures labelled as CPU interpreter times by the parent's report)."""

    def __init__(self) -> None:
        self._now = time.perf_counter
        self.gate_kind = "none (CPU)"
        self.spin = lambda: None
        self._reset_l2 = None

    def time_calls(self, calls: list[Callable[[], Any]], seals: list[Callable[[], None]],
                   gate: bool = True) -> tuple[list[Any], list[float], float]:
        results, figures = [], []
        for call, seal in zip(calls, seals):
            start = self._now()
            results.append(call())
            figures.append((self._now() - start) * 1e3)
            seal()
        return results, figures, 0.0


def _persisting_l2_reset() -> Callable[[], None] | None:
    """cudaCtxResetPersistingL2Cache + a zero persisting carve-out, so lines a submission marked persisting
    (access policy windows) are normal again and the flush evicts them."""
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            reset, set_limit = rt.cudaCtxResetPersistingL2Cache, rt.cudaDeviceSetLimit
        except (OSError, AttributeError):
            continue

        def run(reset: Any = reset, set_limit: Any = set_limit) -> None:
            set_limit(0x06, ctypes.c_size_t(0))  # cudaLimitPersistingL2CacheSize
            reset()

        run()
        return run
    return None


def make_gate(torch: Any, n_sms: int) -> tuple[Callable[[], None], str, Callable[[], None]]:
    """A kernel that occupies every block slot of every SM for GATE_NS, or torch's one-thread sleep when
    Triton cannot build it; and a SPIN_NS busy call of the same kernel (the calibration's stand-in kernel)."""
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def gate_kernel(ns):
            t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                           pack=1)
            now = t0
            while now - t0 < ns:
                now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                                is_pure=False, pack=1)

        grid = (n_sms * BLOCKS_PER_SM,)
        gate_kernel[grid](GATE_NS, num_warps=1)
        torch.cuda.synchronize()
        return ((lambda ns=GATE_NS: gate_kernel[grid](ns, num_warps=1)),
                f"{grid[0]} one-warp blocks for {GATE_NS} ns + {GATE_NS_PER_CALL} ns per call",
                lambda: gate_kernel[(n_sms,)](SPIN_NS, num_warps=1))
    except Exception as err:  # documented fallback: a one-thread sleep hides launch overhead but gates nothing
        sleep = torch.cuda._sleep
        # _sleep counts SM cycles: ~2 per ns at Hopper/Ampere boost clocks.
        return ((lambda ns=GATE_NS: sleep(2 * ns)), f"torch.cuda._sleep fallback ({type(err).__name__})",
                lambda: sleep(2 * SPIN_NS))
