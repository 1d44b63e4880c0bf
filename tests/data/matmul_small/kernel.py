"""matmul kernel, re-exported for this small test task."""
from swizzlelab.tasks.matmul.kernel import *  # noqa: F401,F403
from swizzlelab.tasks.matmul.kernel import custom_kernel, swizzle_args, tile_grid  # noqa: F401
