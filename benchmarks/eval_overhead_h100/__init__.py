"""Study: Isolation overhead on honest kernels (issue 11), measured on an NVIDIA H100 80GB HBM3 (README.md here)."""
