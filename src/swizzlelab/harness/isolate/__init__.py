"""Isolated evaluation of untrusted submissions: a sandboxed child runs the code, the trusted parent feeds it
fresh inputs, judges the output bytes itself and cross-checks the child's clock (docs/isolation.md).
"""

from swizzlelab.harness.isolate.limits import Limits
from swizzlelab.harness.isolate.runner import (
    TASK_KERNEL_CODE,
    IsolatedRun,
    evaluate_isolated,
    secret_seed,
    time_library_ahead,
)

__all__ = ["TASK_KERNEL_CODE", "IsolatedRun", "Limits", "evaluate_isolated", "secret_seed", "time_library_ahead"]
