"""Study: Transpose, matmul, histogram and spmv block orders on an H100 (README.md here)."""
