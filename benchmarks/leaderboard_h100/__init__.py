"""Study: The leaderboard service on an H100 (README.md here)."""
