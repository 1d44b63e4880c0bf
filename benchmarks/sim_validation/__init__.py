"""Study: Simulator vs ncu on H100 and H200 (issue 15) (README.md here)."""
