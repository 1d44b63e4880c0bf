"""Study: Matmul orders under ncu on an H100, and the first GPU-host validation (README.md here)."""
