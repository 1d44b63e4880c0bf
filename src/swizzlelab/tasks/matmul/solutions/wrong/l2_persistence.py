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


# Access policy windows cannot be set on the legacy default stream: the kernel runs on its own stream.
_stream = torch.cuda.Stream() if torch.cuda.is_available() else None


def custom_kernel(data):
    if _rt is None or _stream is None:
        return _kernel(data)
    a = data["a"]
    _rt.cudaDeviceSetLimit(0x06, ctypes.c_size_t(40 << 20))  # cudaLimitPersistingL2CacheSize
    attr = _Attr()
    attr.window = _Window(a.data_ptr(), min(a.numel() * a.element_size(), 40 << 20), 1.0, 2, 1)
    _rt.cudaStreamSetAttribute(ctypes.c_void_p(_stream.cuda_stream), 1, ctypes.byref(attr))  # access policy window
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        out = _kernel(data)
    torch.cuda.current_stream().wait_stream(_stream)
    return out
