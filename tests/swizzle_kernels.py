"""Tiny Triton kernels with swizzle sites, used by the tests to run emitted formulas in the interpreter.

The probe kernels live in the library (swizzlelab.harness.probe, also used on the GPU); `no_site` is test-only.
"""

import triton
import triton.language as tl

from swizzlelab.harness.probe import write_tile_1d, write_tile_2d

__all__ = ["no_site", "write_tile_1d", "write_tile_2d"]


@triton.jit
def no_site(out_ptr, n):
    # the launch index is never given a name, so there is nothing to replace
    tl.store(out_ptr + tl.program_id(0), n)
