# The MI300X transpose order of docs/formats/iteration-log-example.txt as written there (the original work's
# iteration 1, ../shared/seed_formulas/transpose/iteration_01.txt): a 2-D launch (tl.program_id(0) and (1),
# axis 0 fastest) over the transpose task's names M, N, BLOCK_SIZE_M, BLOCK_SIZE_N. Consecutive launch indices go to
# different XCDs; this order gives each XCD one contiguous run of tiles. A bijection when the tile count is a multiple
# of 8. At the built-in sub-line case (4096^2 fp16, 32 x 32 tiles) it is predicted 25% against the own order's 0%:
# Run: swizzlelab simulate transpose --order examples/transpose_mi300x.py --target mi300x --size tile_m=32 --size tile_n=32 --size m=4096 --size n=4096
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
