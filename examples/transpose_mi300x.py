# The MI300X transpose order of docs/formats/iteration-log-example.txt, written for the transpose task's kernel:
# its names (m, n, BLOCK_M, BLOCK_N) and its 1-D launch (the launch index is tl.program_id(0)). Consecutive
# launch indices go to different XCDs; this order gives each XCD one contiguous run of tiles instead.
# A bijection when the tile count is a multiple of 8 (e.g. 4096 x 4096 with 64 x 64 tiles: 64 x 64 tiles).
# Run: swizzlelab simulate transpose --order examples/transpose_mi300x.py --order row_major --target mi300x --size m=4096 --size n=4096
pid = tl.program_id(0)
num_xcds = 8
num_blocks_m = (m + BLOCK_M - 1) // BLOCK_M
num_blocks_n = (n + BLOCK_N - 1) // BLOCK_N
total_blocks = num_blocks_m * num_blocks_n
xcd_id = pid % num_xcds
round_id = pid // num_xcds
new_block_index = round_id + xcd_id * (total_blocks // num_xcds)
pid_m = new_block_index // num_blocks_n
pid_n = new_block_index % num_blocks_n
