# exploit: computes correctly but patches the child's trusted clock to report 1 us per call | gpu: rejected | cpu: pass
from swizzlelab.harness.isolate import child
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def _fast(self, call, gate=True):
    return call(), 0.001, 0.0


child.TrustedClock.time_call = _fast
child.HostClock.time_call = _fast


def custom_kernel(data):
    return _kernel(data)
