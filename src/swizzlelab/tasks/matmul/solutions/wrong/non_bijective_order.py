# exploit: a tile order that is not a bijection (every program takes tile row 0) | gpu: rejected | cpu: rejected
from swizzlelab.swizzle import parse_formula
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

ORDER = parse_formula("pid = tl.program_id(0)\npid_m = 0\npid_n = pid % num_pid_n\n")


def custom_kernel(data):
    return _kernel(data, ORDER)
