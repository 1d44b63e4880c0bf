"""Run a step of a user kernel in a child process whose Triton runs in the other mode than this one: the trace
under the interpreter when kernels here are compiled (a GPU), the compile for its resources when they are
interpreted (no GPU). Triton decides interpreted or compiled when it is imported (its own @jit library, e.g.
tl.cdiv, included), so one process cannot do both.

The child (swizzlelab.userkernel.child_main) rebuilds the kernel from the same request (file, kernel, config,
launcher, seeded inputs) and pickles its answer back; an error in it comes back as the one-line UserError it
raised.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError

CHILD_TIMEOUT_S = 3600.0  # the trace of a large launch under the interpreter takes long; a hang does not stop


@dataclass(frozen=True)
class Request:
    """What open_user_kernel was given, with the task named by its folder (a Task object does not travel)."""

    spec: str
    target: str  # hardware model name
    config: dict[str, Any] = field(default_factory=dict)
    autotune_index: int = 0
    launch: str | None = None
    site: str | None = None
    inputs: Any = None  # swizzlelab.userkernel.Inputs with task=None
    task_path: str | None = None


def request_for(spec: str, model: Any, config: dict[str, Any] | None, autotune_index: int, launch: str | None,
                site: str | None, inputs: Any) -> Request:
    """The request that rebuilds the kernel `spec` (absolute FILE[:KERNEL]) was opened from."""
    task = getattr(inputs, "task", None)
    task_path = str(task.path) if task is not None and hasattr(task, "path") else None
    travelling = replace(inputs, task=None) if inputs is not None else None
    return Request(spec, model.name, dict(config or {}), autotune_index, launch, site, travelling, task_path)


def run_in_child(request: Request, op: str, interpret: bool, timeout_s: float = CHILD_TIMEOUT_S) -> Any:
    """`op` ("trace" or "resources") of the request's kernel in a child process with TRITON_INTERPRET set to
    `interpret`; its pickled answer, or UserError with the child's one-line reason."""
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1" if interpret else "0"
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory(prefix="swizzlelab-child-") as folder:
        ask, answer = Path(folder) / "request.pkl", Path(folder) / "answer.pkl"
        ask.write_bytes(pickle.dumps((request, op)))
        try:
            done = subprocess.run([sys.executable, "-m", "swizzlelab.userkernel.child_main", str(ask), str(answer)],
                                  env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise UserError(f"the {'interpreted' if interpret else 'compiled'} copy of {request.spec} did not "
                            f"finish {op} within {timeout_s:.0f} s") from None
        if not answer.is_file():
            # a child killed by a signal (a segfault in the interpreter, say) may print nothing: name the signal
            died = f"killed by {signal.Signals(-done.returncode).name}" if done.returncode < 0 else "no output"
            tail = (done.stderr.strip().splitlines() or [died])[-1]
            raise UserError(f"the {'interpreted' if interpret else 'compiled'} copy of {request.spec} failed "
                            f"({op}): {tail}")
        with open(answer, "rb") as stream:
            ok, value = pickle.load(stream)
    if not ok:
        raise UserError(value)
    return value
