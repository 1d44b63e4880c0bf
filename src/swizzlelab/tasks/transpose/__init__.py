"""Task `transpose`: out = x.T for a 2-D fp16/fp32 matrix, one program per 2-D tile.

Files: task.yml (cases), reference.py (inputs, reference, check, torch baseline), kernel.py (Triton kernel).
"""
