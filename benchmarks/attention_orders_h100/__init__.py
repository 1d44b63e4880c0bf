"""Study: Attention tasks' block orders on an H100 (README.md here)."""
