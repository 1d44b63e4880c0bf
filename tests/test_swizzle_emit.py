"""Emitted Triton code agrees with the numpy evaluator: each family runs in the interpreter on several grids.

Also: applying a formula to a kernel without a site, or one that lacks a name, is a one-line error.
"""

import numpy as np
import pytest
import torch

from swizzle_kernels import no_site, write_tile_1d, write_tile_2d
from swizzlelab.errors import KernelSiteError
from swizzlelab.swizzle import FAMILIES, apply_swizzle, emit_triton, family, parse_formula, parse_order, to_permutation

GRIDS_2D = [(7, 5), (16, 9), (1, 11), (9, 1)]
GRIDS_1D = [(13,), (40,), (1,)]


def _run(kernel, grid):
    n = int(np.prod(grid))
    out = torch.full((n,), -1, dtype=torch.int32)
    if len(grid) == 2:
        kernel[(n,)](out, grid[0], grid[1])
    else:
        kernel[(n,)](out, n)
    return out.numpy()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_emitted_family_runs_the_numpy_permutation(name):
    rank = 1 if FAMILIES[name].kind == "linear" else 2
    grids = GRIDS_1D if rank == 1 else GRIDS_2D
    for grid in grids:
        formula = parse_order(name, rank)
        perm = to_permutation(formula, grid).perm
        kernel = apply_swizzle(write_tile_1d if rank == 1 else write_tile_2d, formula)
        assert np.array_equal(_run(kernel, grid), perm), (name, grid)


def test_composed_and_linear_on_2d_grid_match():
    for spec in ["xcd:NUM_XCDS=8+grouped:GROUP_M=4", "xcd:NUM_XCDS=3", "xcd+hilbert:SIDE=4"]:
        formula = parse_order(spec, 2)
        for grid in [(7, 5), (12, 12)]:
            kernel = apply_swizzle(write_tile_2d, formula)
            assert np.array_equal(_run(kernel, grid), to_permutation(formula, grid).perm), spec


def test_conditional_expression_is_emitted_as_where():
    formula = parse_formula("pid = tl.program_id(0)\npid = (tl.num_programs(0) - 1 - pid) if pid % 2 == 0 else pid\n")
    assert "tl.where(" in emit_triton(formula)
    grid = (9,)
    kernel = apply_swizzle(write_tile_1d, formula)
    from swizzlelab.swizzle import evaluate

    assert np.array_equal(_run(kernel, grid), evaluate(formula, grid)["pid"])


def test_kernel_without_site_is_a_clear_error():
    with pytest.raises(KernelSiteError, match="no swizzle site"):
        apply_swizzle(no_site, family("identity1d"))


def test_formula_needing_undefined_kernel_name_is_a_clear_error():
    formula = parse_formula("pid = tl.program_id(0)\npid = pid % GROUPS\n")
    with pytest.raises(KernelSiteError, match="'GROUPS'"):
        apply_swizzle(write_tile_1d, formula)


def test_formula_yielding_pid_only_for_a_2d_site_is_a_clear_error():
    with pytest.raises(KernelSiteError, match="pid_m, pid_n"):
        apply_swizzle(write_tile_2d, family("xcd"))


def test_formula_clobbering_a_kernel_argument_is_a_clear_error():
    formula = parse_formula("pid = tl.program_id(0)\nn = 3\npid = pid\n")
    with pytest.raises(KernelSiteError, match="reassigns 'n'"):
        apply_swizzle(write_tile_1d, formula)


def test_same_formula_text_reuses_the_compiled_kernel():
    a = apply_swizzle(write_tile_2d, family("grouped", GROUP_M=3))
    b = apply_swizzle(write_tile_2d, family("grouped", GROUP_M=3))
    assert a is b
