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
    # The largest set-aside and window the device allows (H100: less than the 50 MB L2); asking for more is
    # cudaErrorInvalidValue, which torch would report at the next launch.
    persisting, window = ctypes.c_int(0), ctypes.c_int(0)
    _rt.cudaDeviceGetAttribute(ctypes.byref(persisting), 108, torch.cuda.current_device())  # MaxPersistingL2CacheSize
    _rt.cudaDeviceGetAttribute(ctypes.byref(window), 109, torch.cuda.current_device())  # MaxAccessPolicyWindowSize
    size = min(a.numel() * a.element_size(), persisting.value, window.value)
    _rt.cudaDeviceSetLimit(0x06, ctypes.c_size_t(persisting.value))  # cudaLimitPersistingL2CacheSize
    attr = _Attr()
    attr.window = _Window(a.data_ptr(), size, 1.0, 2, 1)
    _rt.cudaStreamSetAttribute(ctypes.c_void_p(_stream.cuda_stream), 1, ctypes.byref(attr))  # access policy window
    _rt.cudaGetLastError()  # an error of the calls above stays here, not in the next launch
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        out = _kernel(data)
    torch.cuda.current_stream().wait_stream(_stream)
    return out
