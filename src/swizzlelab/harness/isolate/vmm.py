"""Device memory the trusted parent shares with the isolated child by file descriptor: the CUDA driver's virtual
memory API with POSIX fd handles, passed over a Unix socket (SCM_RIGHTS).

Legacy CUDA IPC (cudaIpcGetMemHandle, torch's tensor sharing) maps a buffer only into a process of the same uid
and PID namespace; an fd handle crosses both, so the child can run as `nobody` in namespaces of its own.
"""

from __future__ import annotations

import ctypes
import os
import socket
from typing import Any

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_DRIVER: Any = None


def _driver() -> Any:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = ctypes.CDLL("libcuda.so.1")
    return _DRIVER


def _call(name: str, *args: Any) -> None:
    code = getattr(_driver(), name)(*args)
    if code != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(code, ctypes.byref(text))
        raise OSError(f"{name} failed: CUDA error {code} ({(text.value or b'?').decode()})")


def _prop(device: int) -> _Prop:
    prop = _Prop()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


def padded_size(nbytes: int, device: int) -> int:
    """`nbytes` rounded up to the allocation granularity (2 MiB on Hopper)."""
    gran = ctypes.c_size_t()
    prop = _prop(device)
    _call("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop),
          ctypes.c_int(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    step = max(int(gran.value), 1)
    return -(-max(int(nbytes), 1) // step) * step


class Mapping:
    """One physical allocation mapped read-write into this process on `device`. The parent creates it
    (`create`), the child imports it from a received fd (`imported`); unmapped and released when freed."""

    def __init__(self, handle: int, size: int, device: int):
        self.handle = handle
        self.size = size
        self.device = device
        self.ptr = 0
        ptr = ctypes.c_uint64()
        _call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
              ctypes.c_uint64(0), ctypes.c_uint64(0))
        try:
            _call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                  ctypes.c_uint64(0))
            access = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        except OSError:
            _driver().cuMemUnmap(ptr, ctypes.c_size_t(size))
            _driver().cuMemAddressFree(ptr, ctypes.c_size_t(size))
            _driver().cuMemRelease(ctypes.c_uint64(handle))
            raise
        self.ptr = int(ptr.value)

    @classmethod
    def create(cls, nbytes: int, device: int) -> Mapping:
        size = padded_size(nbytes, device)
        handle = ctypes.c_uint64()
        prop = _prop(device)
        _call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0))
        return cls(int(handle.value), size, device)

    @classmethod
    def imported(cls, fd: int, size: int, device: int) -> Mapping:
        handle = ctypes.c_uint64()
        try:
            _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd),
                  ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        finally:
            os.close(fd)  # the imported handle keeps the allocation alive
        return cls(int(handle.value), int(size), device)

    def export_fd(self) -> int:
        """A new file descriptor for this allocation; the caller sends it and closes it."""
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), ctypes.c_uint64(self.handle),
              ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), ctypes.c_uint64(0))
        return int(fd.value)

    def tensor(self, torch: Any) -> Any:
        """The whole mapping as a uint8 CUDA tensor that keeps this Mapping alive while any view of it lives."""
        return torch.as_tensor(_ArrayInterface(self), device=f"cuda:{self.device}")

    def __del__(self) -> None:
        if self.ptr and _DRIVER is not None:
            _DRIVER.cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
            _DRIVER.cuMemAddressFree(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
            _DRIVER.cuMemRelease(ctypes.c_uint64(self.handle))
            self.ptr = 0


class _ArrayInterface:
    """__cuda_array_interface__ over a Mapping; torch keeps this object (and so the Mapping) with the tensor."""

    def __init__(self, mapping: Mapping):
        self.mapping = mapping
        self.__cuda_array_interface__ = {"shape": (mapping.size,), "typestr": "|u1", "version": 3,
                                         "data": (mapping.ptr, False), "strides": None}


def send_fd(sock: socket.socket, fd: int) -> None:
    try:
        socket.send_fds(sock, [b"F"], [fd])
    finally:
        os.close(fd)


def recv_fd(sock: socket.socket) -> int:
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if len(fds) != 1:
        raise OSError("no file descriptor arrived with the buffer")
    return int(fds[0])
