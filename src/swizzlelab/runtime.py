"""Where Triton kernels run: the GPU when CUDA is present, else the CPU interpreter (TRITON_INTERPRET=1).

Must be called before `triton` is first imported, because Triton reads the variable at import time.
"""

from __future__ import annotations

import os


def cuda_available() -> bool:
    """True when torch sees a CUDA device; never raises."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def ensure_triton_backend() -> str:
    """Select the interpreter when no GPU is present; returns 'cuda' or 'interpreter'."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        if cuda_available():
            return "cuda"
        os.environ["TRITON_INTERPRET"] = "1"
    from swizzlelab.interpreter_compat import fix_interpreter_scalar_index

    fix_interpreter_scalar_index()
    return "interpreter"


def device() -> str:
    """The torch device string kernels' tensors should live on."""
    return "cuda" if cuda_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
