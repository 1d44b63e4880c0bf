"""The isolated child: imports torch and its timing tools before the submission, then obeys the parent's frames
(load, bind, call) and answers with JSON. Nothing it says is trusted: the parent checks outputs and clocks.

Started by swizzlelab.harness.isolate.sandbox as `python -I -c BOOT` after the sandbox (limits.py) is applied.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import traceback
from typing import Any, Callable

from swizzlelab.harness.timers import HostClock, TrustedClock
from swizzlelab.harness.isolate import protocol, vmm
from swizzlelab.harness.isolate.transport import ChildSlots


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if "swizzlelab" not in f.filename and not f.filename.startswith("<frozen")]
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return (text[0] if text else type(err).__name__)[:300] + where


class Child:
    """State of the child between frames."""

    def __init__(self, in_fd: int, out_fd: int, sandbox: dict[str, Any], lock_down: Callable[[], dict[str, Any]],
                 fd_socket: int | None = None) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self.fd_socket = socket.socket(fileno=fd_socket) if fd_socket is not None else None
        self.sandbox = sandbox
        self.lock_down = lock_down
        self.torch: Any = None
        self.on_gpu = False
        self.clock: TrustedClock | HostClock | None = None
        self.fn: Callable[[Any], Any] | None = None
        self.bound: dict[int, ChildSlots] = {}
        self._copy: Any = None
        self._take: Any = None
        self._zero: Any = None
        self._tensor_type: Any = None

    def reply(self, **message: Any) -> None:
        protocol.send(self.out_fd, message)

    # -- frames --------------------------------------------------------------------------------------------
    def op_init(self, msg: dict[str, Any]) -> None:
        from swizzlelab.runtime import device, ensure_triton_backend

        ensure_triton_backend()
        import torch

        self.torch = torch
        self.on_gpu = device() == "cuda"
        self._copy = torch._C.TensorBase.copy_
        self._take = torch.take
        self._zero = torch._C.TensorBase.zero_
        self._tensor_type = torch.Tensor
        if msg.get("expect_gpu") and not self.on_gpu:
            reason = "torch.cuda.is_available() is False"
            try:
                torch.cuda.init()
            except Exception as err:
                reason = _one_line(err)
            self.reply(ok=False, error=f"CUDA is not usable in the child: {reason}")
            return
        if self.on_gpu:
            torch.cuda.init()
            if msg.get("gpu_mem_bytes"):
                total = torch.cuda.get_device_properties(0).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, int(msg["gpu_mem_bytes"]) / total))
            self.clock = TrustedClock(torch)
        elif msg.get("cpu_timing"):
            self.clock = HostClock()
        from swizzlelab.harness.sysinfo import system_info

        info = system_info().to_dict()
        # Everything trusted is loaded and CUDA is up: now the rest of the sandbox, before any submission code.
        late = self.lock_down()
        self.sandbox = {key: self.sandbox.get(key, []) + late.get(key, []) for key in ("applied", "skipped")}
        clock = {"gate": self.clock.gate_kind, "persisting_l2_reset": self.clock._reset_l2 is not None} \
            if self.clock is not None else {}
        self.reply(ok=True, system=info, sandbox=self.sandbox, pid=os.getpid(), clock=clock)

    def op_load(self, msg: dict[str, Any]) -> None:
        path = msg["path"]
        spec = importlib.util.spec_from_file_location("submission", path)
        if spec is None or spec.loader is None:
            self.reply(ok=False, error=f"{os.path.basename(path)} is not a Python file")
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module  # triton.jit and dataclasses look the module up while it executes
        # From here on Triton compiles into the submission's own cache, apart from the trusted kernels' cache.
        os.environ["TRITON_CACHE_DIR"] = os.environ.get("SWIZZLELAB_SUBMISSION_TRITON_CACHE",
                                                        os.environ.get("TRITON_CACHE_DIR", ""))
        try:
            spec.loader.exec_module(module)
        except BaseException as err:  # SystemExit included: an exit at import is a failed load, not a pass
            self.reply(ok=False, error=f"the submission failed to import: {_one_line(err)}")
            return
        fn = getattr(module, "custom_kernel", None)
        if not callable(fn):
            self.reply(ok=False, error="the submission defines no custom_kernel(data)")
            return
        order = msg.get("order")
        if order is not None:
            # An order given on the command line: parsed here from the text the parent read and proved.
            from swizzlelab.swizzle import parse_formula

            formula = parse_formula(order["source"], tuple(order["outputs"]))
            self.fn = lambda data: fn(data, order=formula)
        else:
            self.fn = fn
        self.reply(ok=True)

    def op_bind(self, msg: dict[str, Any]) -> None:
        try:
            fd = None
            if msg["spec"].get("kind") == "vmm":
                if self.fd_socket is None:
                    raise OSError("no socket for device buffers")
                fd = vmm.recv_fd(self.fd_socket)  # sent just before this frame
            self.bound[int(msg["id"])] = ChildSlots(msg["spec"], "cuda" if self.on_gpu else "cpu", fd)
        except Exception as err:  # e.g. the driver refused the import: the parent falls back to shared host memory
            self.reply(ok=False, error=f"cannot map the inputs: {_one_line(err)}")
            return
        self.reply(ok=True)

    def op_unbind(self, msg: dict[str, Any]) -> None:
        self.bound.pop(int(msg["id"]), None)
        if self.on_gpu:
            self.torch.cuda.empty_cache()
        self.reply(ok=True)

    def _call(self, slots: ChildSlots, data: dict[str, Any]) -> tuple[Any, str]:
        """Run the submission once and make sure its result is in the output slot (copied inside the timed
        interval when it returned another tensor)."""
        assert self.fn is not None
        result = self.fn(data)
        out = slots.out
        if result is out:
            return result, "out"
        if not isinstance(result, self._tensor_type):
            return result, f"returned {type(result).__name__}, not a tensor"
        if tuple(result.shape) != tuple(out.shape) or result.dtype != out.dtype:
            return result, f"returned shape {tuple(result.shape)} {result.dtype}, expected {tuple(out.shape)} {out.dtype}"
        self._copy(out, result)
        return result, "copied"

    def _seal(self, slots: ChildSlots) -> Callable[[], None]:
        """Copies the output elements at the parent's sampled positions into the parent's seal buffer."""
        index, seal = slots.tensors.get("_seal_idx"), slots.tensors.get("_seal")
        if index is None or seal is None:
            return lambda: None
        out, take = slots.out, self._take
        return lambda: take(out, index, out=seal)

    def op_call(self, msg: dict[str, Any]) -> None:
        slots = self.bound[int(msg["id"])]
        slots.before_call()
        data = slots.data()
        timed = bool(msg.get("timed")) and self.clock is not None
        try:
            if timed:
                assert self.clock is not None
                (_, returned), t_ms, tail_ms = self.clock.time_call(lambda: self._call(slots, data),
                                                                    bool(msg.get("gate", True)))
            else:
                _, returned = self._call(slots, data)
                t_ms = tail_ms = None
                if self.on_gpu:
                    self.torch._C._cuda_synchronize()
        except BaseException as err:  # a crash of the kernel is a failed call; SystemExit too
            if isinstance(err, KeyboardInterrupt):
                raise
            self.reply(ok=False, rep=msg.get("rep"), error=f"the kernel raised {_one_line(err)}")
            return
        slots.after_call()
        self.reply(ok=True, rep=msg.get("rep"), t_ms=t_ms, tail_ms=tail_ms, returned=returned)

    def op_calls(self, msg: dict[str, Any]) -> None:
        """One timed request: the submission on each listed slot set in turn, back to back after one gate (with
        `null`, trusted busy stand-in calls instead: the parent's calibration, made before the submission exists)."""
        if self.clock is None:
            self.reply(ok=False, error="no clock in this child (a GPU, or cpu_timing for tests, is needed)")
            return
        if msg.get("null") and self.fn is not None:
            self.reply(ok=False, error="calibration after the submission was loaded")
            return
        group = [self.bound[int(i)] for i in msg["ids"]]
        for slots in group:
            slots.before_call()
        inputs = [slots.data() for slots in group]
        if msg.get("null"):
            # A busy stand-in that also writes its output, so its seal holds values as a real call's does.
            spin, zero = self.clock.spin, self._zero
            calls = [(lambda slots=slots: (spin(), zero(slots.out), (slots.out, "out"))[2]) for slots in group]
        else:
            calls = [(lambda slots=slots, data=data: self._call(slots, data)) for slots, data in zip(group, inputs)]
        try:
            results, figures, tail_ms = self.clock.time_calls(calls, [self._seal(slots) for slots in group],
                                                              bool(msg.get("gate", True)))
        except BaseException as err:  # a crash of the kernel is a failed request; SystemExit too
            if isinstance(err, KeyboardInterrupt):
                raise
            self.reply(ok=False, error=f"the kernel raised {_one_line(err)}")
            return
        for slots in group:
            slots.after_call()
        self.reply(ok=True, t_ms=figures, tail_ms=tail_ms, returned=[returned for _, returned in results])

    def serve(self) -> None:
        while True:
            try:
                msg = protocol.recv(self.in_fd)
            except protocol.ProtocolError:
                return  # the parent went away
            op = msg.get("op")
            if op == "exit":
                self.reply(ok=True)
                return
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                self.reply(ok=False, error=f"unknown op {op!r}")
                continue
            handler(msg)


def main(in_fd: int, out_fd: int, sandbox: dict[str, Any], lock_down: Callable[[], dict[str, Any]],
         fd_socket: int | None = None) -> None:
    """Serve frames until the parent says exit; a SystemExit from the submission never reaches here as 0."""
    child = Child(in_fd, out_fd, sandbox, lock_down, fd_socket)
    try:
        child.serve()
    except BaseException as err:
        try:
            child.reply(ok=False, fatal=True, error=f"the child failed: {_one_line(err)}")
        except OSError:
            pass
        _flush()
        os._exit(3)
    _flush()
    os._exit(0)


def _flush() -> None:
    """What the submission printed reaches the parent's tail even though the child ends with os._exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
