# honest: the task's Triton kernel with the grouped:GROUP_M=8 tile order, returning a new tensor | gpu: honest_time | cpu: pass
import torch

from swizzlelab.swizzle import parse_order
from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

ORDER = parse_order("grouped:GROUP_M=8", 2)


def custom_kernel(data):
    out = torch.empty_like(data["out"])
    return _kernel({**data, "out": out}, ORDER)
