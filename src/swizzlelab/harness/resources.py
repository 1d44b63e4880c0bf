"""What the compiler gave a Triton kernel on this GPU: registers and spills per thread, shared memory, warps,
and the programs per SM those allow (an order's formula can cost registers, and with them occupancy).
"""

from __future__ import annotations

from typing import Any

from swizzlelab.hw import nvidia_blocks_per_sm


def compiled_resources(jit_fn: Any) -> list[dict[str, Any]]:
    """One record per compiled specialisation of `jit_fn` that has run (its handles loaded): n_regs, n_spills,
    shared_bytes, num_warps and blocks_per_sm (Hopper's limits). Empty where nothing ran on a GPU."""
    found = []
    for cache in getattr(jit_fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else {}
        for compiled in kernels.values():
            n_regs = getattr(compiled, "n_regs", None)
            if n_regs is None:
                continue
            meta = compiled.metadata
            shared = int(getattr(meta, "shared", 0))
            warps = int(getattr(meta, "num_warps", 4))
            found.append({"n_regs": int(n_regs), "n_spills": int(getattr(compiled, "n_spills", 0) or 0),
                          "shared_bytes": shared, "num_warps": warps,
                          "blocks_per_sm": nvidia_blocks_per_sm(int(n_regs), shared, warps)})
    return found
