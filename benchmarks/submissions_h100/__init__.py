"""Study: Leader-speed kernels on the H100 (issue 14) (README.md here)."""
