"""The swizzle site found automatically in kernels shaped like public ones, and formulas spliced there.

Each kernel of swizzle_site_kernels runs in the interpreter and writes the tile each program addressed, so a
swizzled kernel's output is compared with the order the numpy evaluator proves for the same formula.
"""

import textwrap

import numpy as np
import pytest
import torch

import swizzle_site_kernels as K
from swizzlelab.errors import KernelSiteError
from swizzlelab.swizzle import (
    Site,
    apply_swizzle,
    family,
    find_site,
    kernel_site,
    parse_formula,
    parse_order,
    to_permutation,
)

GRID = (10, 7)  # tiles of 16 x 16 over M = 160, N = 112
M, N = 16 * GRID[0], 16 * GRID[1]


def _run_grouped(kernel):
    out = torch.full((GRID[0] * GRID[1],), -1, dtype=torch.int32)
    kernel[(out.numel(),)](out, M, N)
    return out.numpy()


def _run_persistent(kernel):
    out = torch.full((GRID[0] * GRID[1],), -1, dtype=torch.int32)
    kernel[(4,)](out, M, N, BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, GROUP_SIZE_M=3, NUM_SMS=4)
    return out.numpy()


def _run_attention(kernel, z=2, h=3, blocks=5):
    out = torch.full((blocks * z * h,), -1, dtype=torch.int32)
    kernel[(blocks, z * h)](out, z, h, 16 * blocks, h * 1000, 1000, BLOCK_M=16)
    return out.numpy()


def _run_add(kernel, n_elements=1000, block=64):
    x, y = torch.rand(n_elements, generator=torch.Generator().manual_seed(1)), torch.rand(n_elements)
    out = torch.full((n_elements,), float("nan"))
    blocks = -(-n_elements // block)
    order = torch.full((blocks,), -1, dtype=torch.int32)
    kernel[(blocks,)](x, y, out, order, n_elements, BLOCK_SIZE=block)
    assert torch.equal(out, x + y)
    return order.numpy()


def _lines(site: Site) -> list[str]:
    return [line.strip() for line in site.lines if line.strip() and not line.strip().startswith("#")]


# --- the sites found ----------------------------------------------------------------------------------------------
def test_tutorial_grouped_matmul_site_spans_the_remap_block_with_num_pid_m_inside():
    site = kernel_site(K.grouped_matmul_order)
    assert site.kind == "program_id" and site.index_name == "pid" and site.outputs == ("pid_m", "pid_n")
    assert _lines(site)[0] == "pid = tl.program_id(axis=0)"
    assert _lines(site)[-1] == "pid_n = (pid % num_pid_in_group) // group_size_m"
    assert len(_lines(site)) == 9
    assert site.inputs == ("M", "BLOCK_SIZE_M", "N", "BLOCK_SIZE_N", "GROUP_SIZE_M")
    assert site.kept == (
        "num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)",
        "num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)",
        "num_pid_in_group = GROUP_SIZE_M * num_pid_n",
    )
    # line numbers are the file's, so a caller can print which lines were taken
    source = open(site.file).read().splitlines()
    assert source[site.start_line - 1].strip() == "pid = tl.program_id(axis=0)"
    assert source[site.end_line - 1].strip().startswith("pid_n = ")
    assert "swizzle_site_kernels.py lines" in site.describe() and site.describe().endswith("-> pid_m, pid_n")


def test_persistent_matmul_site_is_the_remap_of_tile_id_inside_the_loop():
    site = kernel_site(K.persistent_matmul_order)
    assert site.kind == "loop" and site.index_name == "tile_id" and site.loop_count == "num_tiles"
    assert site.outputs == ("pid_m", "pid_n")
    assert _lines(site) == [
        "group_id = tile_id // num_pid_in_group",
        "first_pid_m = group_id * GROUP_SIZE_M",
        "group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)",
        "pid_m = first_pid_m + (tile_id % group_size_m)",
        "pid_n = (tile_id % num_pid_in_group) // group_size_m",
    ]
    assert site.inputs == ("tile_id", "num_pid_in_group", "GROUP_SIZE_M", "num_pid_m")
    assert site.definitions == (
        "num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)",
        "num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)",
        "num_pid_in_group = GROUP_SIZE_M * num_pid_n",
    )


def test_attention_forward_site_is_the_two_program_ids():
    site = kernel_site(K.attention_forward_order)
    assert _lines(site) == ["start_m = tl.program_id(0)", "off_hz = tl.program_id(1)"]
    assert site.outputs == ("start_m", "off_hz") and site.launch_rank == 2


def test_elementwise_site_is_the_program_id_line():
    site = kernel_site(K.add_order)
    assert _lines(site) == ["pid = tl.program_id(axis=0)"] and site.outputs == ("pid",)
    assert site.explicit  # the documented one-line site


def test_markers_override_the_automatic_site():
    source = textwrap.dedent(
        """
        def k(out_ptr, num_pid_n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            # swizzle: begin
            pid_m = pid // num_pid_n
            pid_n = pid % num_pid_n
            # swizzle: end
            tl.store(out_ptr + pid_m * BLOCK + tl.arange(0, BLOCK), pid_n)
        """
    )
    site = find_site(source, "k")
    assert site.kind == "markers" and site.outputs == ("pid_m", "pid_n") and site.inputs == ("pid", "num_pid_n")


def test_remap_in_a_helper_call_names_the_fix():
    source = textwrap.dedent(
        """
        def k(out_ptr, M, N, BLOCK_SIZE_M: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
            start_pid = tl.program_id(axis=0)
            num_tiles = M * N
            for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
                pid_m, pid_n = _compute_pid(tile_id, N, M, GROUP_SIZE_M, NUM_SMS)
                offs = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
                tl.store(out_ptr + offs, pid_n)
        """
    )
    with pytest.raises(KernelSiteError, match=r"call of _compute_pid\(\.\.\.\): inline the helper's body"):
        find_site(source, "k")


def test_row_loop_without_a_remap_falls_back_to_the_program_id_line():
    # softmax's shape: programs stride over rows and use the row index straight in pointer arithmetic
    source = textwrap.dedent(
        """
        def softmax(out_ptr, in_ptr, in_row_stride, n_rows, BLOCK_SIZE: tl.constexpr):
            row_start = tl.program_id(0)
            row_step = tl.num_programs(0)
            for row_idx in tl.range(row_start, n_rows, row_step):
                row_start_ptr = in_ptr + row_idx * in_row_stride
                row = tl.load(row_start_ptr + tl.arange(0, BLOCK_SIZE))
                tl.store(out_ptr + row_idx * in_row_stride + tl.arange(0, BLOCK_SIZE), row)
        """
    )
    site = find_site(source, "softmax")
    assert site.kind == "program_id" and site.outputs == ("row_start",) and site.stop - site.start == 1


def test_kernel_without_a_named_program_id_has_no_site():
    with pytest.raises(KernelSiteError, match="no swizzle site"):
        find_site("def k(x_ptr):\n    tl.store(x_ptr + tl.program_id(0), 1)\n", "k")


# --- the kernel's own order and formulas spliced in, run in the interpreter -----------------------------------------
def test_grouped_matmul_own_order_and_spliced_orders_run_as_proven():
    site = kernel_site(K.grouped_matmul_order)
    own = to_permutation(parse_formula(site.formula_text()), GRID, consts={"GROUP_SIZE_M": 3})
    assert np.array_equal(_run_grouped(K.grouped_matmul_order), own.perm)
    for spec in ("hilbert:SIDE=4", "xcd:NUM_XCDS=4+grouped:GROUP_M=2", "column_major"):
        formula = parse_order(spec, 2)
        swizzled = apply_swizzle(K.grouped_matmul_order, formula)
        assert type(swizzled) is type(K.grouped_matmul_order)  # still autotuned, same configs
        assert swizzled.configs == K.grouped_matmul_order.configs
        assert np.array_equal(_run_grouped(swizzled), to_permutation(formula, GRID).perm), spec


def test_persistent_matmul_own_order_and_spliced_orders_run_as_proven():
    site = kernel_site(K.persistent_matmul_order)
    own = to_permutation(parse_formula(site.formula_text()), GRID, consts={"GROUP_SIZE_M": 3})
    assert np.array_equal(_run_persistent(K.persistent_matmul_order), own.perm)
    for spec in ("hilbert:SIDE=4", "xcd:NUM_XCDS=3+grouped:GROUP_M=4"):
        formula = parse_order(spec, 2)
        perm = _run_persistent(apply_swizzle(K.persistent_matmul_order, formula))
        assert np.array_equal(perm, to_permutation(formula, GRID).perm), spec


def test_attention_forward_own_order_and_spliced_orders_run_as_proven():
    own = parse_formula("start_m = tl.program_id(0)\noff_hz = tl.program_id(1)\n", ("start_m", "off_hz"))
    assert np.array_equal(_run_attention(K.attention_forward_order), to_permutation(own, (5, 6)).perm)
    # a 1-D formula runs on the 2-D launch in launch-index order; its pid_m/pid_n become start_m/off_hz
    for spec in ("grouped:GROUP_M=2", "diagonal"):
        formula = parse_order(spec, 2)
        perm = _run_attention(apply_swizzle(K.attention_forward_order, formula))
        assert np.array_equal(perm, to_permutation(formula, (5, 6)).perm), spec


def test_elementwise_spliced_order_runs_as_proven():
    formula = parse_order("xcd:NUM_XCDS=3", 1)
    order = _run_add(apply_swizzle(K.add_order, formula))
    assert np.array_equal(order, to_permutation(formula, (16,)).perm)


def test_formula_reading_program_id_1_on_a_1d_kernel_is_refused():
    formula = parse_formula("pid_m = tl.program_id(0)\npid_n = tl.program_id(1)\n")
    with pytest.raises(KernelSiteError, match=r"tl.program_id\(1\) but kernel 'add_order' launches a 1-D grid"):
        apply_swizzle(K.add_order, formula)


def test_launch_index_read_after_the_site_keeps_its_meaning():
    site = kernel_site(K.split_slot_order)
    assert site.outputs == ("pid_m", "pid_n") and len(_lines(site)) == 3
    grid = (6, 5)
    for formula in (parse_order("xcd:NUM_XCDS=4+grouped:GROUP_M=2", 2),
                    parse_formula("pid = tl.program_id(0)\nq = 29 - pid\npid_m = q // 5\npid_n = q % 5\n")):
        out = torch.full((30,), -1, dtype=torch.int32)
        slot = torch.full((30,), -1, dtype=torch.int32)
        apply_swizzle(K.split_slot_order, formula)[(30,)](out, slot, grid[0], grid[1], BLOCK=4)
        assert np.array_equal(out.numpy(), to_permutation(formula, grid).perm)
        assert slot.numpy().tolist() == list(range(30))  # pid after the site is still the launch index


def test_formula_with_its_own_output_name_is_renamed_to_the_sites():
    formula = parse_formula("pid = tl.program_id(0)\nnew_pid = (pid * 5) % 16\n", ("new_pid",))
    order = _run_add(apply_swizzle(K.add_order, formula))
    assert np.array_equal(order, to_permutation(formula, (16,)).perm)


def test_the_kernels_own_order_splices_back_unchanged():
    for kernel, run in ((K.persistent_matmul_order, _run_persistent), (K.grouped_matmul_order, _run_grouped)):
        own = parse_formula(kernel_site(kernel).formula_text())
        assert np.array_equal(run(apply_swizzle(kernel, own)), run(kernel))
