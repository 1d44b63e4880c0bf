"""swizzlelab.optimize."""
