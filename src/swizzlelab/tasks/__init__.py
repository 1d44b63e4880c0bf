"""swizzlelab.tasks."""
