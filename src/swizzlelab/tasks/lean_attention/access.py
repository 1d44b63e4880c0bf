"""Analytic access model of `lean_attention`'s stream-K kernel: each program walks its slice of the work line.

Exact (the interpreter trace of kernel.py's first launch, step for step); the merge kernel is not modelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.tasks.lean_attention import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder

_SEARCH_KEYS = 64  # program-order keys below this are binary-search iterations


def context_lengths(seed: int, batch: int, min_ctx: int, max_ctx: int) -> np.ndarray:
    """ctx_lens exactly as reference.generate_input draws them (seeded CPU generator)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    lens = torch.randint(int(min_ctx), int(max_ctx) + 1, (int(batch),), generator=gen, dtype=torch.int32)
    return lens.numpy().astype(np.int64)


# size: the task contract (tasks/README.md): access_model takes the case's sizes and the seed as keywords, one each.
def access_model(
    *,
    batch: int,
    heads: int,
    max_ctx: int,
    n_programs: int,
    kv_heads: int | None = None,
    min_ctx: int = 1,
    head_dim: int = 128,
    seed: int | None = None,
    ctx_lens: Any = None,
    config: Any = None,
    **_: Any,
) -> AccessTrace:
    """Per program: binary search over block_offsets, then per head touched: offsets, ctx_len, q, K/V blocks,
    and the partial (m, l, acc) stores. Context lengths come from `ctx_lens`, else from `seed`."""
    cfg = config or kernel.GPU_CONFIG  # predictions are for the benchmark (GPU) configuration
    kv_heads = int(kv_heads or heads)
    if ctx_lens is None:
        if seed is None:
            raise UserError("lean_attention access model needs the case's seed (or ctx_lens): pass seed=case['seed']")
        ctx_lens = context_lengths(seed, batch, min_ctx, max_ctx)
    lens = np.asarray(ctx_lens, dtype=np.int64).reshape(-1)
    if lens.size != batch or lens.min() < 1 or lens.max() > max_ctx:
        raise UserError(f"ctx_lens must hold {batch} lengths in 1..{max_ctx}")
    n_bh, group, bn, dim = batch * heads, heads // kv_heads, cfg.block_n, head_dim
    blocks_per_bh = np.repeat(-(-lens // bn), heads)
    offsets = np.zeros(n_bh + 1, dtype=np.int64)
    np.cumsum(blocks_per_bh, out=offsets[1:])
    total = int(offsets[-1])
    progs = np.arange(n_programs, dtype=np.int64)
    unit_begin = progs * total // n_programs

    builder = TraceBuilder((n_programs,), auto_steps=True)
    q = builder.tensor("q_ptr", (batch, heads, dim), 2)
    k = builder.tensor("k_ptr", (batch, kv_heads, max_ctx, dim), 2)
    v = builder.tensor("v_ptr", (batch, kv_heads, max_ctx, dim), 2)
    lens_t = builder.tensor("ctx_lens_ptr", (batch,), 4)
    offs_t = builder.tensor("block_offsets_ptr", (n_bh + 1,), 4)
    n_slots = n_programs + n_bh
    part_m = builder.tensor("part_m_ptr", (n_slots,), 4)
    part_l = builder.tensor("part_l_ptr", (n_slots,), 4)
    part_acc = builder.tensor("part_acc_ptr", (n_slots, dim), 4)

    # prologue: total units, then one block_offsets[mid] load per binary-search iteration
    builder.span(offs_t, progs, 0, n_bh, n_bh + 1)
    lo, hi = np.zeros(n_programs, dtype=np.int64), np.full(n_programs, n_bh - 1, dtype=np.int64)
    for it in range(_SEARCH_KEYS - 1):
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi + 1) // 2
        builder.span(offs_t, progs[active], 1 + it, mid[active], mid[active] + 1, site=0)
        go_up = offsets[mid] <= unit_begin
        lo = np.where(active & go_up, mid, lo)
        hi = np.where(active & ~go_up, mid - 1, hi)

    # work units u: head bh(u), key block within the head, owning program p(u)
    unit = np.arange(total, dtype=np.int64)
    bh_of = np.searchsorted(offsets, unit, side="right") - 1
    prog_of = ((unit + 1) * n_programs - 1) // total if total else unit
    new_seg = np.r_[True, (bh_of[1:] != bh_of[:-1]) | (prog_of[1:] != prog_of[:-1])] if total else np.zeros(0, bool)
    seg_first = np.flatnonzero(new_seg)
    seg_last = np.r_[seg_first[1:] - 1, total - 1] if total else seg_first
    seg_bh, seg_prog = bh_of[seg_first], prog_of[seg_first]
    seg_key = _SEARCH_KEYS + 3 * seg_first
    batch_of_seg = seg_bh // heads
    builder.span(offs_t, seg_prog, seg_key, seg_bh, seg_bh + 1)
    builder.span(offs_t, seg_prog, seg_key, seg_bh + 1, seg_bh + 2)
    builder.span(lens_t, seg_prog, seg_key, batch_of_seg, batch_of_seg + 1)
    builder.span(q, seg_prog, seg_key, seg_bh * dim, seg_bh * dim + dim)

    batch_u = bh_of // heads
    kv_head_u = (bh_of % heads) // group
    row0 = (unit - offsets[bh_of]) * bn
    row1 = np.minimum(row0 + bn, lens[batch_u])
    unit_key = _SEARCH_KEYS + 3 * unit + 1
    for cache in (k, v):
        builder.block(cache, prog_of, unit_key, (row0, row1), (0, dim), lead=(batch_u, kv_head_u))

    slot = seg_prog + seg_bh
    end_key = _SEARCH_KEYS + 3 * seg_last + 2
    builder.span(part_m, seg_prog, end_key, slot, slot + 1, write=True)
    builder.span(part_l, seg_prog, end_key, slot, slot + 1, write=True)
    builder.span(part_acc, seg_prog, end_key, slot * dim, slot * dim + dim, write=True)
    meta = {
        "task": "lean_attention",
        "sizes": f"batch={batch} heads={heads} kv_heads={kv_heads} max_ctx={max_ctx} n_programs={n_programs}",
        "config": repr(cfg),
        "kernel": "lean_attention_kernel (stream-K pass; merge kernel not modelled)",
    }
    return builder.build(meta)


def line_accesses(
    *, batch: int, heads: int, max_ctx: int, n_programs: int, head_dim: int = 128, config: Any = None, **_: Any
) -> int:
    """An upper bound of access_model's line accesses (every context at max_ctx): K and V rows of every key
    block of every head, plus per program the search and the partial stores."""
    cfg = config or kernel.GPU_CONFIG
    per_row = -(-head_dim * 2 // 128)
    blocks = batch * heads * -(-max_ctx // cfg.block_n)
    return blocks * 2 * cfg.block_n * per_row + n_programs * (64 + 2 * per_row * 4) + batch * heads * 8
