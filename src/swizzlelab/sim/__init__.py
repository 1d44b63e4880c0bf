"""swizzlelab.sim."""
