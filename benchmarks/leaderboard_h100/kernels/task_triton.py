# histogram submission 1: the task's own Triton kernel (row-major tile order), submitted as a user would.
from swizzlelab.tasks.histogram.kernel import custom_kernel as _task_kernel


def custom_kernel(data):
    return _task_kernel(data)
