"""The child process of swizzlelab.userkernel.child: rebuild a user kernel from a pickled Request in this
process's Triton mode (TRITON_INTERPRET as the parent set it) and pickle back its trace or its resources.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.userkernel.child import Request


def _open(request: Request, interpret: bool) -> Any:
    from swizzlelab.hw import get_model
    from swizzlelab.userkernel import open_user_kernel

    inputs = request.inputs
    if request.task_path and inputs is not None:
        from swizzlelab.tasks import load_task

        inputs = replace(inputs, task=load_task(request.task_path))
    return open_user_kernel(request.spec, get_model(request.target), config=request.config,
                            autotune_index=request.autotune_index, launch=request.launch, inputs=inputs,
                            site=request.site, interpret=interpret)


def _answer(request: Request, op: str) -> Any:
    if op == "trace":
        return _open(request, interpret=True).trace()
    if op == "resources":
        from swizzlelab.userkernel.resources import from_compiled

        user_kernel = _open(request, interpret=False)
        found = from_compiled(user_kernel.launcher.warmup(), "compiled for sm_90 here, without a GPU")
        if found is None:
            raise UserError("ptxas/cuobjdump gave no register count")
        return found
    raise UserError(f"unknown child step {op!r}")


def main(argv: list[str]) -> int:
    ask, answer = Path(argv[0]), Path(argv[1])
    if os.environ.get("TRITON_INTERPRET") != "1":
        import triton  # noqa: F401 - imported before swizzlelab selects a backend: its @jit library compiles
    request, op = pickle.loads(ask.read_bytes())

    try:
        result: tuple[bool, Any] = (True, _answer(request, op))
    except UserError as err:
        result = (False, str(err))
    except Exception as err:  # noqa: BLE001 - reported to the parent as one line
        result = (False, f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}")
    # streamed, protocol 5: a trace's arrays (1.35 GB at 8192^3) go to the file without a copy in memory first
    # (3.8 -> 2.4 s to write; the parent's pickle.load of the stream 1.0 -> 0.5 s)
    with open(answer, "wb") as stream:
        pickle.dump(result, stream, protocol=5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
