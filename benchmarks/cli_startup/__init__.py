"""Study: Start-up time of the swizzlelab command (CPU) (README.md here)."""
