"""flash_attention task: fp16 non-causal flash-attention forward with a 2-D (head, query block) tile grid.

See task.yml for the cases and reference.py / kernel.py for the contract functions.
"""
