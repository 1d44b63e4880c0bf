"""Nested (two-level) orders and the search's wave-aware candidates: bijections on any grid, the exact walk on
small grids, one-line errors for malformed specs, and the search composing and tuning nests."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swizzle_kernels import write_tile_2d
from swizzlelab.errors import UserError
from swizzlelab.optimize.search import NEST, Candidate, coarse_candidates, neighbours, wave_blocks
from swizzlelab.swizzle import apply_swizzle, family, parse_order, prove, to_permutation
from swizzlelab.swizzle.families import nest
from test_swizzle_emit import _run

OUTERS = ["serpentine", "identity", "column_major", "hilbert:SIDE=4", "grouped:GROUP_M=3", "diagonal"]
INNERS = ["column_major", "identity", "grouped:GROUP_M=2", "hilbert:SIDE=2", "serpentine"]


@settings(max_examples=60, deadline=None)
@given(grid=st.tuples(st.integers(1, 40), st.integers(1, 40)), bm=st.integers(1, 12), bn=st.integers(1, 12),
       outer=st.sampled_from(OUTERS), inner=st.sampled_from(INNERS), xcds=st.integers(0, 5))
def test_every_nest_is_a_bijection(grid, bm, bn, outer, inner, xcds):
    spec = (f"xcd:NUM_XCDS={xcds}+" if xcds else "") + f"{outer}>{inner}@{bm}x{bn}"
    proof = prove(parse_order(spec), grid)
    assert proof.is_bijection, (spec, grid, proof.message())


def test_nest_walks_blocks_then_tiles_then_leftovers():
    # 5 x 5 grid, 2 x 2 blocks walked serpentine (block row 0 left to right, block row 1 right to left), tiles of
    # a block column by column; then the right strip (column 4, rows 0-3) row-major; then the bottom row.
    perm = to_permutation(parse_order("serpentine>column_major@2x2"), (5, 5)).perm
    tiles = [(int(t) // 5, int(t) % 5) for t in perm]
    assert tiles[:8] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    assert tiles[8:16] == [(2, 2), (3, 2), (2, 3), (3, 3), (2, 0), (3, 0), (2, 1), (3, 1)]
    assert tiles[16:20] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert tiles[20:] == [(4, 0), (4, 1), (4, 2), (4, 3), (4, 4)]


def test_nest_of_one_block_is_the_inner_order_and_blocks_of_one_tile_the_outer():
    grid = (6, 9)
    whole = to_permutation(parse_order("serpentine>grouped:GROUP_M=4@6x9"), grid).perm
    assert np.array_equal(whole, to_permutation(family("grouped", GROUP_M=4), grid).perm)
    single = to_permutation(parse_order("hilbert:SIDE=2>column_major@1x1"), grid).perm
    assert np.array_equal(single, to_permutation(family("hilbert", SIDE=2), grid).perm)


def test_nest_with_grouped_bands_is_grouped_serpentine_up_to_the_inner_direction():
    # Bands of 4 rows, blocks as wide as the grid: serpentine over one block column is plain grouped.
    grid = (12, 10)
    banded = to_permutation(parse_order("serpentine>column_major@4x10"), grid).perm
    assert np.array_equal(banded, to_permutation(family("grouped", GROUP_M=4), grid).perm)


@pytest.mark.parametrize("spec, words", [
    ("serpentine>column_major", "OUTER>INNER@BMxBN"),
    ("serpentine>column_major@8", "OUTER>INNER@BMxBN"),
    ("serpentine>column_major@0x4", "block_m=0"),
    ("xcd>column_major@2x2", "must be 2-D"),
    ("serpentine>nosuch@2x2", "unknown swizzle family"),
])
def test_bad_nest_specs_are_one_line_errors(spec, words):
    with pytest.raises(UserError) as err:
        parse_order(spec)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_nest_rejects_linear_orders_directly():
    with pytest.raises(UserError, match="must be 2-D"):
        nest(family("identity"), family("stride", STRIDE=2), 2, 2)


def test_nest_splices_into_a_triton_kernel_and_runs_under_the_interpreter():
    for spec in ["serpentine>column_major@2x3", "xcd:NUM_XCDS=3+hilbert:SIDE=2>grouped:GROUP_M=2@4x2"]:
        formula = parse_order(spec)
        kernel = apply_swizzle(write_tile_2d, formula)
        for grid in [(5, 7), (8, 4)]:
            assert np.array_equal(_run(kernel, grid), to_permutation(formula, grid).perm), (spec, grid)


def test_wave_blocks_are_sized_to_the_resident_programs():
    shapes = wave_blocks(264, 64, 64)
    assert (16, 16) in shapes and (8, 8) in shapes  # a wave, a quarter wave
    assert all(bm <= 64 and bn <= 64 and bm * bn > 1 for bm, bn in shapes)
    assert all(bm <= 4 and bn <= 6 for bm, bn in wave_blocks(264, 4, 6))


def test_search_sweeps_wave_nests_and_tunes_their_composition():
    cands = coarse_candidates((64, 64), n_domains=1, resident=264)
    nests = [c for c in cands if c.family == NEST]
    assert nests and cands.index(nests[0]) > [c.spec for c in cands].index("grouped:GROUP_M=8")
    assert "serpentine>column_major@16x16" in {c.spec for c in nests}
    assert not [c for c in coarse_candidates((64, 64), n_domains=1) if c.family == NEST]  # resident unknown
    for cand in nests[:6]:
        assert prove(parse_order(cand.spec), (64, 64)).is_bijection
    start = Candidate(NEST, (("BLOCK_M", 8), ("BLOCK_N", 8)), outer="serpentine", inner="column_major")
    near = {c.spec for c in neighbours(start, (64, 64), n_domains=8)}
    assert {"serpentine>column_major@16x8", "serpentine>column_major@8x9", "identity>column_major@8x8",
            "serpentine>grouped:GROUP_M=4@8x8", "xcd:NUM_XCDS=8+serpentine>column_major@8x8"} <= near
    on_mi300x = [c for c in coarse_candidates((32, 32), n_domains=8, resident=76) if c.family == NEST]
    assert any(c.xcd == 8 for c in on_mi300x) and any(c.xcd == 0 for c in on_mi300x)
    assert "blocks of" in start.describe() and start.group() == "serpentine>column_major"
