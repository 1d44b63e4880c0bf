"""Work around Triton 3.6's CPU interpreter under numpy >= 2.4: `range(0, K, BLOCK)` on a runtime scalar.

The interpreter stores scalar kernel arguments as 1-element arrays and converts them with int(), which numpy
2.4 refuses for arrays of ndim > 0 (triton-lang/triton#9171, fixed upstream after 3.6). Only the interpreter
is patched; compiled GPU kernels never take this path.
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


def fix_interpreter_scalar_index() -> bool:
    """Make the interpreter's tensor.__index__ accept 1-element arrays; idempotent; True when patched."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter

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
