"""The swizzle language: parse a block-order formula, prove it a bijection, name it, emit it as Triton.

Formula text -> Formula (lang) -> per-program values (evaluate) -> Proof/Permutation (proof) -> kernel (emit),
at the swizzle site found in the kernel's source (site).
"""

from swizzlelab.swizzle.emit import apply_swizzle, emit_triton, spliced_source
from swizzlelab.swizzle.evaluate import evaluate, implicit_names, launch_shape
from swizzlelab.swizzle.families import FAMILIES, compose, family, family_names, parse_order
from swizzlelab.swizzle.lang import Formula, parse_formula
from swizzlelab.swizzle.site import KernelSite, Site, find_site, kernel_site
from swizzlelab.swizzle.proof import CheckResult, Permutation, Proof, check_order, permutation_id, prove, to_permutation

__all__ = [
    "CheckResult",
    "check_order",
    "FAMILIES",
    "KernelSite",
    "Site",
    "Formula",
    "Permutation",
    "Proof",
    "apply_swizzle",
    "compose",
    "emit_triton",
    "evaluate",
    "family",
    "family_names",
    "find_site",
    "implicit_names",
    "kernel_site",
    "launch_shape",
    "parse_formula",
    "parse_order",
    "permutation_id",
    "prove",
    "spliced_source",
    "to_permutation",
]
