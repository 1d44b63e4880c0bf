# exploit: honest kernel launched on a side stream, returning before it finishes (the seal after the call sees it unfinished) | gpu: rejected | cpu: pass
import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel

_side = torch.cuda.Stream() if torch.cuda.is_available() else None


def custom_kernel(data):
    if _side is None:
        return _kernel(data)
    with torch.cuda.stream(_side):
        _kernel(data)
    return data["out"]
