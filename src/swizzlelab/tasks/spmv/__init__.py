"""Task `spmv`: y = A @ x for a CSR matrix A (fp32), one program per row.

Files: task.yml (cases), reference.py (matrix generator, reference, check, torch.sparse baseline), kernel.py.
"""
