"""Study: The swizzle language compiled for a GPU (README.md here)."""
