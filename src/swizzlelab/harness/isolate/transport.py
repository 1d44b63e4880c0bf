"""Buffers owned by the trusted parent that a case's inputs and output live in while the child runs on them:
a shared file mapped by both sides (CPU), or one CUDA allocation the child maps from a file descriptor (GPU).

The parent fills the inputs, poisons the output, and after each call reads the output bytes itself.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swizzlelab.harness.isolate import vmm

ALIGN = 256


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> Any:
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return value


@dataclass
class _Slot:
    name: str
    shape: tuple[int, ...]
    dtype: Any
    offset: int = 0
    nbytes: int = 0


class SlotSet:
    """The shared buffers of one case. `kind` is 'host' (a file both processes map) or 'vmm' (one device
    allocation exported as a file descriptor: vmm.py)."""

    def __init__(self, template: dict[str, Any], kind: str, folder: Path, owner_uid: int | None = None,
                 seal_n: int = 0):
        import torch

        if not isinstance(template, dict) or "out" not in template:
            raise ValueError("a task's inputs must be a dict holding the output buffer under 'out'")
        self.kind = kind
        self.id = 0
        self.layout: dict[str, Any] = {}
        self.slots: list[_Slot] = []
        self._host_file: Path | None = None
        self._mm: mmap.mmap | None = None
        for key, value in template.items():
            self.layout[key] = self._plan(str(key), value, torch)
        out = template["out"]
        self.seal_n = min(int(seal_n), out.numel()) if isinstance(out, torch.Tensor) else 0
        if self.seal_n:
            # Outside the layout (not in the submission's dict): sampled output positions, and the copy of the
            # output there that the child's trusted loop takes in stream order right after each call ends.
            self.slots.append(_Slot("_seal_idx", (self.seal_n,), torch.int64, nbytes=8 * self.seal_n))
            self.slots.append(_Slot("_seal", (self.seal_n,), out.dtype, nbytes=self.seal_n * out.element_size()))
        total = max(ALIGN, sum(slot.nbytes + ALIGN for slot in self.slots))
        self._mapping: vmm.Mapping | None = None
        if kind == "host":
            fd, name = _shared_file(folder)
            os.ftruncate(fd, total)
            if owner_uid is not None:
                os.fchown(fd, owner_uid, owner_uid)
            self._mm = mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            os.close(fd)
            self._host_file = Path(name)
            raw = torch.frombuffer(self._mm, dtype=torch.uint8, count=total)
        elif kind == "vmm":
            self._mapping = vmm.Mapping.create(total, torch.cuda.current_device())
            raw = self._mapping.tensor(torch)
        else:
            raise ValueError(f"unknown transport {kind!r}")
        offset = 0
        for slot in self.slots:
            slot.offset = offset
            offset += -(-(slot.nbytes or 1) // ALIGN) * ALIGN
        self.tensors = {s.name: _view(raw, s.offset, s.nbytes, s.dtype, s.shape) for s in self.slots}

    def _plan(self, key: str, value: Any, torch: Any) -> dict[str, Any]:
        if isinstance(value, torch.Tensor):
            if value.layout == torch.sparse_csr:
                return {"kind": "csr", "size": list(value.shape),
                        "crow": self._plan(key + ".crow", value.crow_indices(), torch),
                        "col": self._plan(key + ".col", value.col_indices(), torch),
                        "values": self._plan(key + ".values", value.values(), torch)}
            if value.layout != torch.strided:
                raise ValueError(f"input {key!r} has layout {value.layout}, which cannot be shared")
            slot = _Slot(key, tuple(value.shape), value.dtype, nbytes=value.numel() * value.element_size())
            self.slots.append(slot)
            return {"kind": "tensor", "slot": key, "shape": list(slot.shape), "dtype": _dtype_name(value.dtype)}
        if value is None or isinstance(value, (bool, int, float, str)) or (
            isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value)
        ):
            return {"kind": "value", "value": list(value) if isinstance(value, tuple) else value}
        raise ValueError(f"input {key!r} of type {type(value).__name__} cannot be passed to an isolated child")

    # -- parent side ---------------------------------------------------------------------------------------
    def load(self, data: dict[str, Any]) -> None:
        """Copy the tensors of `data` (same case, fresh seed) into the slots."""
        for key, entry in self.layout.items():
            self._load(entry, data[key])

    def _load(self, entry: dict[str, Any], value: Any) -> None:
        if entry["kind"] == "tensor":
            self.tensors[entry["slot"]].copy_(value)
        elif entry["kind"] == "csr":
            self._load(entry["crow"], value.crow_indices())
            self._load(entry["col"], value.col_indices())
            self._load(entry["values"], value.values())

    def inputs_intact(self, data: dict[str, Any]) -> str | None:
        """None when every input slot still equals `data`; else the name of the first one the call changed."""
        import torch

        for key, entry in self.layout.items():
            if key == "out":
                continue
            tensors = [(key, entry)] if entry["kind"] == "tensor" else (
                [(key + ".crow", entry["crow"]), (key + ".col", entry["col"]), (key + ".values", entry["values"])]
                if entry["kind"] == "csr" else [])
            sources = [data[key]] if entry["kind"] == "tensor" else (
                [data[key].crow_indices(), data[key].col_indices(), data[key].values()] if entry["kind"] == "csr" else [])
            for (name, sub), src in zip(tensors, sources):
                if not torch.equal(self.tensors[sub["slot"]], src.to(self.tensors[sub["slot"]].device)):
                    return name
        return None

    @property
    def out(self) -> Any:
        return self.tensors["out"]

    def nbytes(self) -> int:
        return sum(slot.nbytes for slot in self.slots)

    def arm_seal(self, seed: int) -> None:
        """Fresh sampled positions for the next call, and the seal buffer poisoned."""
        import torch

        from swizzlelab.harness.correctness import poison_

        if not self.seal_n:
            return
        index = self.tensors["_seal_idx"]
        gen = torch.Generator(device=index.device).manual_seed(int(seed))
        index.copy_(torch.randint(0, self.out.numel(), (self.seal_n,), generator=gen, device=index.device))
        poison_(self.tensors["_seal"])

    def seal_written(self) -> bool:
        """True once the seal buffer holds no poison: the child's copy after the call has run on the GPU."""
        from swizzlelab.harness.correctness import count_poisoned

        if not self.seal_n:
            return True
        seal = self.tensors["_seal"]
        return count_poisoned(seal, seal.dtype)[0] == 0

    def seal_intact(self) -> bool:
        """True when the elements sampled right after the call ended equal the output now, bit for bit."""
        import torch

        if not self.seal_n:
            return True
        now = torch.take(self.out, self.tensors["_seal_idx"])
        return bool(torch.equal(now.view(torch.uint8), self.tensors["_seal"].view(torch.uint8)))

    def spec(self) -> dict[str, Any]:
        """What the child needs to map the slots: the layout plus the file path or the IPC handles."""
        spec: dict[str, Any] = {"kind": self.kind, "layout": self.layout,
                                "slots": {s.name: [s.offset, s.nbytes, list(s.shape), _dtype_name(s.dtype)]
                                          for s in self.slots}}
        if self.kind == "host":
            spec["file"] = str(self._host_file)
            spec["size"] = len(self._mm) if self._mm is not None else 0
        else:
            assert self._mapping is not None
            spec["size"] = self._mapping.size  # the file descriptor travels beside the frame (vmm.send_fd)
        return spec

    def export_fd(self) -> int | None:
        """A descriptor of the device allocation for the child (None for shared host memory)."""
        return self._mapping.export_fd() if self._mapping is not None else None

    def close(self) -> None:
        self.tensors = {}
        self._mapping = None  # unmapped once the last view of it is gone
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a tensor view still alive; the mapping goes with the process
                pass
            self._mm = None
        if self._host_file is not None:
            self._host_file.unlink(missing_ok=True)
            self._host_file = None


def _view(raw: Any, offset: int, nbytes: int, dtype: Any, shape: tuple[int, ...]) -> Any:
    return raw[offset:offset + nbytes].view(dtype).view(shape)


def _shared_file(folder: Path) -> tuple[int, str]:
    folder.mkdir(parents=True, exist_ok=True)
    name = str(folder / f"slots-{os.urandom(6).hex()}.bin")
    return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), name


# ---------------------------------------------------------------- child side


class ChildSlots:
    """The child's view of a SlotSet: `data` is the dict handed to custom_kernel, `out` the output slot.

    Shared host memory on a GPU child is mirrored: inputs are copied to the device before each call and the
    output back after it, by this trusted code, inside the parent's wall-clock window."""

    def __init__(self, spec: dict[str, Any], device: str = "cpu", fd: int | None = None):
        import torch

        self._mm: mmap.mmap | None = None
        self.tensors: dict[str, Any] = {}
        self.host: dict[str, Any] = {}
        if spec["kind"] == "host":
            fd = os.open(spec["file"], os.O_RDWR)
            try:
                self._mm = mmap.mmap(fd, int(spec["size"]), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            raw = torch.frombuffer(self._mm, dtype=torch.uint8, count=int(spec["size"]))
        elif spec["kind"] == "vmm":
            if fd is None:
                raise ValueError("a device buffer arrived without its file descriptor")
            raw = vmm.Mapping.imported(fd, int(spec["size"]), torch.cuda.current_device()).tensor(torch)
        else:
            raise ValueError(f"unknown transport {spec['kind']!r}")
        for name, (offset, nbytes, shape, dtype) in spec["slots"].items():
            self.tensors[name] = _view(raw, int(offset), int(nbytes), _dtype(dtype), tuple(shape))
        if spec["kind"] == "host" and device != "cpu":
            self.host = self.tensors
            self.tensors = {name: torch.empty_like(t, device=device) for name, t in self.host.items()}
        self.layout = spec["layout"]

    def before_call(self) -> None:
        for name, host in self.host.items():
            self.tensors[name].copy_(host)

    def after_call(self) -> None:
        for name in ("out", "_seal"):
            if name in self.host:
                self.host[name].copy_(self.tensors[name])

    def data(self) -> dict[str, Any]:
        """A fresh dict of the case's inputs (the submission may keep or mutate the dict; not the slots)."""
        return {key: self._value(entry) for key, entry in self.layout.items()}

    def _value(self, entry: dict[str, Any]) -> Any:
        import torch

        if entry["kind"] == "tensor":
            return self.tensors[entry["slot"]]
        if entry["kind"] == "csr":
            crow, col, values = (self._value(entry[k]) for k in ("crow", "col", "values"))
            return torch.sparse_csr_tensor(crow, col, values, size=tuple(entry["size"]), check_invariants=False)
        value = entry["value"]
        return list(value) if isinstance(value, list) else value

    @property
    def out(self) -> Any:
        return self.tensors["out"]
