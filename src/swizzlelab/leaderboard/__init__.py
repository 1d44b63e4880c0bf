"""The kernel leaderboard service: database, job queue, workers (local or Ray), REST API and ranking.

Built on harness.isolate: a submission never runs inside the server's or a worker's own process.
"""
