"""Study: Simulator vs Nsight Compute: the first check (H100) (README.md here)."""
