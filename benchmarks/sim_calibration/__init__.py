"""Study: Simulator calibration against the first ncu measurements (CPU) (README.md here)."""
