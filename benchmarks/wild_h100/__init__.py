"""Study: wild_h100: a tutorial-style matmul optimized with zero edits on an H100 (README.md here)."""
