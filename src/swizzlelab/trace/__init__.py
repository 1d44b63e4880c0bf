"""swizzlelab.trace."""
