"""The original MI300X work's formulas, as written, on swizzlelab's kernels shaped like its kernels (issue 56)."""
