"""Study: Harness reports measured on an H100 (2026-11-22) (README.md here)."""
