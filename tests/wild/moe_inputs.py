"""swizzlelab's own --inputs function for applied_ai_fused_moe.py's `invoke_fused_moe_kernel`: seeded tokens,
expert weights and top-k routing, aligned to the block size the way the file's moe_align_block_size does with
vLLM's custom op (here in torch: each expert's token slots padded to a multiple of block_m, padding ids =
the number of routed tokens, one expert id per block).

Written for swizzlelab's tests (not published code).
"""

import torch


def moe_inputs(M, E, N, K, top_k, block_m, seed, device):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn((M, K), generator=generator).to(torch.float16)
    weights = torch.randn((E, N, K), generator=generator).to(torch.float16) / K ** 0.5
    scores = torch.rand((M, E), generator=generator)
    topk_weights, topk_ids = torch.topk(torch.softmax(scores, dim=-1), top_k, dim=-1)
    flat = topk_ids.flatten()
    sorted_ids, expert_ids = [], []
    for expert in range(E):
        slots = torch.nonzero(flat == expert).flatten().tolist()
        padded = -(-len(slots) // block_m) * block_m
        sorted_ids += slots + [flat.numel()] * (padded - len(slots))
        expert_ids += [expert] * (padded // block_m)
    out = torch.empty((M, top_k, N), dtype=torch.float16)
    return {
        "A": hidden.to(device), "B": weights.to(device), "C": out.to(device),
        "topk_weights": topk_weights.to(device), "topk_ids": topk_ids.to(torch.int32).to(device),
        "sorted_token_ids": torch.tensor(sorted_ids, dtype=torch.int32, device=device),
        "expert_ids": torch.tensor(expert_ids, dtype=torch.int32, device=device),
        "num_tokens_post_padded": torch.tensor([len(sorted_ids)], dtype=torch.int32, device=device),
        "mul_routed_weight": False, "top_k": top_k,
        "config": {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2},
    }
