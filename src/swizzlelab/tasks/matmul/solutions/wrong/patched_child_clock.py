# exploit: computes correctly but patches the child's trusted clock to report 1 us per call | gpu: rejected | cpu: pass
from swizzlelab.harness.isolate import child
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def _fast(self, calls, seals, gate=True):
    # Skips the flush, the gate and the synchronisation too; the seals run so the outputs look complete.
    results = []
    for call, seal in zip(calls, seals):
        results.append(call())
        seal()
    return results, [0.001] * len(calls), 0.0


child.TrustedClock.time_calls = _fast
child.HostClock.time_calls = _fast


def custom_kernel(data):
    return _kernel(data)
