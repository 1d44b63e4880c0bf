# exploit: marks the inputs as persisting in L2 (access policy window) so the harness's flush cannot evict them | gpu: honest_time | cpu: skip
import ctypes

import torch

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def _cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


_rt = _cudart()


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _Attr(ctypes.Union):
    _fields_ = [("window", _Window), ("pad", ctypes.c_byte * 64)]


def custom_kernel(data):
    if _rt is not None:
        a = data["a"]
        _rt.cudaDeviceSetLimit(0x06, ctypes.c_size_t(40 << 20))  # cudaLimitPersistingL2CacheSize
        attr = _Attr()
        attr.window = _Window(a.data_ptr(), min(a.numel() * a.element_size(), 40 << 20), 1.0, 2, 1)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        _rt.cudaStreamSetAttribute(stream, 1, ctypes.byref(attr))  # cudaStreamAttributeAccessPolicyWindow
    return _kernel(data)
