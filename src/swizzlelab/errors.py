"""Errors a user can fix: each carries a one-line message naming what is wrong and how to fix it.

The CLI prints these without a traceback; anything else is a bug in swizzlelab and keeps its traceback.
"""


class UserError(Exception):
    """Bad input or a missing resource; str(err) is the one-line message shown to the user."""


class FormulaError(UserError):
    """A swizzle formula that cannot be parsed, contains a forbidden construct, or fails to evaluate."""


class NotABijectionError(UserError):
    """A formula whose outputs do not hit every tile exactly once on the given grid."""


class KernelSiteError(UserError):
    """A kernel without a swizzle site, or one whose site does not define what the formula needs."""


class NoGpuError(UserError):
    """An action that needs a CUDA GPU was asked for on a machine without one."""


class ToolMissingError(UserError):
    """An external tool (for example Nsight Compute's `ncu`) is not installed or not on PATH."""
