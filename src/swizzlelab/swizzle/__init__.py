"""swizzlelab.swizzle."""
