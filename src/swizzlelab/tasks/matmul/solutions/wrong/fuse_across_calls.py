# exploit: leaves each call's output for the next call, which computes both in one go (batching across calls) | gpu: rejected | cpu: rejected
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

_pending = []


def custom_kernel(data):
    # The outputs of earlier calls are still in the shared buffers: finishing them now would look fine to a
    # harness that only checks outputs after a batch of calls.
    while _pending:
        _kernel(_pending.pop())
    _pending.append(data)
    return data["out"]
