# exploit: caches the result by id() of the input tensors | gpu: rejected | cpu: rejected
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

_cache = {}


def custom_kernel(data):
    key = (id(data["a"]), id(data["b"]))
    if key not in _cache:
        _cache[key] = _kernel(data).clone()
    return data["out"].copy_(_cache[key])
