# honest: the task's Triton kernel (row-major order) | gpu: honest_time | cpu: pass
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def custom_kernel(data):
    return _kernel(data)
