"""Study: Trace building speed (CPU) (README.md here)."""
