# The MI300X transpose formula of docs/formats/iteration-log-example.txt as written there: a 2-D launch
# (tl.program_id(0), tl.program_id(1)) over the leaderboard kernel's names M, N, BLOCK_SIZE_M, BLOCK_SIZE_N.
# A bijection when the tile count is a multiple of 8. For the transpose task use transpose_mi300x.py.
# Run: swizzlelab check examples/transpose_mi300x_2d.py --grid 100x100 --arg M=6400 --arg N=6400 --const BLOCK_SIZE_M=64 --const BLOCK_SIZE_N=64
pid_m = tl.program_id(0)
pid_n = tl.program_id(1)
num_xcds = 8
num_blocks_m = (M + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M
num_blocks_n = (N + BLOCK_SIZE_N - 1) // BLOCK_SIZE_N
total_blocks = num_blocks_m * num_blocks_n
original_block_index = pid_m * num_blocks_n + pid_n
xcd_id = original_block_index % num_xcds
round_id = original_block_index // num_xcds
new_block_index = round_id + xcd_id * (total_blocks // num_xcds)
pid_m = new_block_index // num_blocks_n
pid_n = new_block_index % num_blocks_n
