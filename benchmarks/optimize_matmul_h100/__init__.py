"""Study: Block orders of matmul 8192^3 on an H100: can an order read under 1.1 GB? (README.md here)."""
