"""Study: Alternating the K direction per wave: matmul 8192^3 on an H100 (issue 15, DRAM reads) (README.md here)."""
