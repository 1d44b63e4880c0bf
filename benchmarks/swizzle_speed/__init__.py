"""Study: Swizzle formulas on a million programs (CPU) (README.md here)."""
