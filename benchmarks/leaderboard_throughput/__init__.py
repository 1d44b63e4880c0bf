"""Study: Leaderboard service throughput (CPU) (README.md here)."""
