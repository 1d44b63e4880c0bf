"""swizzlelab.harness."""
