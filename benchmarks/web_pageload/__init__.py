"""Study: Web page load on a database of 10,000 runs (README.md here)."""
