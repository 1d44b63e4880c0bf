# exploit: computes only the first half of the rows | gpu: rejected | cpu: rejected
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def custom_kernel(data):
    a, out = data["a"], data["out"]
    half = max(1, a.shape[0] // 2)
    _kernel({"a": a[:half], "b": data["b"], "out": out[:half]})
    return out
