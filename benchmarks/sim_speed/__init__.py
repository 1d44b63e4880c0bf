"""Study: Simulator speed (issue 15, part 1) (README.md here)."""
