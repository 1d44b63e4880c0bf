"""swizzlelab: find, prove and measure block-order swizzles for Triton GPU kernels.

Data flows one way: formula -> permutation -> trace/simulation -> measurement -> report.
"""

__version__ = "0.1.0"
