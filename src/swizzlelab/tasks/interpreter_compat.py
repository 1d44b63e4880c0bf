"""Kept for imports written before the fix moved to swizzlelab.interpreter_compat.

runtime.ensure_triton_backend() applies it; new code needs no import of its own.
"""

from swizzlelab.interpreter_compat import fix_interpreter_scalar_index

__all__ = ["fix_interpreter_scalar_index"]
