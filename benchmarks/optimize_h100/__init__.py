"""Study: swizzlelab optimize on an H100: four tasks (README.md here)."""
