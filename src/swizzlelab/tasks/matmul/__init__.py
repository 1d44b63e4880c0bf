"""Task `matmul`: C = A @ B with fp16 inputs, fp32 accumulation and fp16 output, one program per C tile.

Files: task.yml (cases), reference.py (inputs, reference, check, torch baseline), kernel.py (Triton kernel).
"""
