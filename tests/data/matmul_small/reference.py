"""matmul reference, re-exported for this small test task."""
from swizzlelab.tasks.matmul.reference import *  # noqa: F401,F403
from swizzlelab.tasks.matmul.reference import baseline, check, generate_input, ref_kernel  # noqa: F401
