"""Make Triton 3.6's CPU interpreter run kernels as the GPU does: `range(0, K, BLOCK)` on a runtime scalar under
numpy >= 2.4, and `tl.assume(...)` as the hint it is on the GPU instead of an assertion.

The interpreter stores scalar kernel arguments as 1-element arrays and converts them with int(), which numpy
2.4 refuses for arrays of ndim > 0 (triton-lang/triton#9171, fixed upstream after 3.6). It also asserts every
`tl.assume` ("Assume failed"), which published kernels use as hints that do not hold for every program (e.g.
`tl.assume(pid_m > 0)` in ROCm's tuned GEMM). Only the interpreter is patched; compiled GPU kernels never take
these paths.
"""

from __future__ import annotations

import os
from typing import Any

_MARK = "_swizzlelab_scalar_index_fix"


def _scalar_index(self: Any) -> int:
    data = self.handle.data
    if getattr(data, "size", 1) != 1:
        raise TypeError(f"only single-element tensors can be used as an index, got shape {data.shape}")
    return int(data.reshape(-1)[0])


def fix_interpreter_scalar_index(force: bool = False) -> bool:
    """Make the interpreter's tensor.__index__ accept 1-element arrays and tl.assume a hint; idempotent; True
    when patched. `force` patches even when kernels run on a GPU (a copy of a kernel file traced there)."""
    if os.environ.get("TRITON_INTERPRET") != "1" and not force:
        return False
    from triton.runtime import interpreter

    _assume_as_hint(interpreter)

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _scalar_index)

    setattr(patch_lang_tensor, _MARK, True)
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


def _assume_as_hint(interpreter: Any) -> None:
    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_assume, _MARK, False):
        return

    def create_assume(self: Any, condition: Any) -> None:
        return None  # a hint to the compiler on the GPU: never checked there

    setattr(create_assume, _MARK, True)
    builder.create_assume = create_assume
