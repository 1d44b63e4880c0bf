"""Kernels in the shape of public Triton kernels, runnable in the interpreter, for the site finder's tests.

Each writes, per program (or per tile of a persistent loop), the tile its offsets address, so the output is the
order the kernel ran. Written anew for swizzlelab after the public shapes (tutorial grouped matmul, persistent
matmul, fused attention forward, elementwise add); unmodified by the tests.
"""

import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "GROUP_SIZE_M": 3})], key=["M", "N"])
@triton.jit
def grouped_matmul_order(out_ptr, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                         GROUP_SIZE_M: tl.constexpr):
    """The tutorial's grouped ordering, num_pid_m/num_pid_n computed inside the remap block."""
    # Map program ids `pid` to the block of C it should compute, in groups of GROUP_SIZE_M rows.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    tile = (tl.min(offs_am) // BLOCK_SIZE_M) * num_pid_n + tl.min(offs_bn) // BLOCK_SIZE_N
    tl.store(out_ptr + tl.program_id(axis=0), tile)


@triton.jit
def persistent_matmul_order(out_ptr, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                            GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Persistent: NUM_SMS programs stride over the tiles; the grouped remap of tile_id is inside the loop."""
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS):
        group_id = tile_id // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + (tile_id % group_size_m)
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        start_m = pid_m * BLOCK_SIZE_M
        start_n = pid_n * BLOCK_SIZE_N
        offs_am = start_m + tl.arange(0, BLOCK_SIZE_M)
        offs_bn = start_n + tl.arange(0, BLOCK_SIZE_N)
        tile = (tl.min(offs_am) // BLOCK_SIZE_M) * num_pid_n + tl.min(offs_bn) // BLOCK_SIZE_N
        tl.store(out_ptr + tile_id, tile)


@triton.jit
def attention_forward_order(out_ptr, Z, H, N_CTX, stride_oz, stride_oh, BLOCK_M: tl.constexpr):
    """Fused attention forward's launch: axis 0 = query block, axis 1 = batch * head."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    qvk_offset = off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tile = (tl.min(offs_m) // BLOCK_M) * (Z * H) + (qvk_offset // stride_oh).to(tl.int32)
    tl.store(out_ptr + tl.program_id(0) + tl.num_programs(0) * tl.program_id(1), tile)


@triton.jit
def add_order(x_ptr, y_ptr, output_ptr, order_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Elementwise add; also records which block each program added."""
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
    tl.store(order_ptr + tl.program_id(axis=0), block_start // BLOCK_SIZE)


@triton.jit
def split_slot_order(out_ptr, slot_ptr, num_pid_m, num_pid_n, BLOCK: tl.constexpr):
    """Reads its launch index again after the remap (a split-k style slot)."""
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs = (pid_m * num_pid_n + pid_n) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + pid, tl.min(offs) // BLOCK)
    tl.store(slot_ptr + pid, pid)
