# exploit: computes on the first call of each case, replays that output on every later call | gpu: rejected | cpu: rejected
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

_last = {}


def custom_kernel(data):
    out = data["out"]
    key = tuple(out.shape)
    if key in _last and _last[key][1] > 0:
        _last[key][1] -= 1
        return out.copy_(_last[key][0])
    _last[key] = [_kernel(data).clone(), 1000]
    return out
