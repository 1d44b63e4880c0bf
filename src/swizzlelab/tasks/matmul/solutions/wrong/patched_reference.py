# exploit: replaces the reference kernel with one returning zeros, then returns zeros | gpu: rejected | cpu: rejected
import torch

import swizzlelab.tasks.matmul.reference as reference

reference.ref_kernel = lambda data: torch.zeros_like(data["out"])


def custom_kernel(data):
    return data["out"].zero_()
