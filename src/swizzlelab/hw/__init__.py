"""swizzlelab.hw."""
