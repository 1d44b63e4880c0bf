# XCD chunking with a correct tail: each XCD gets a contiguous run of logical block ids.
# Run: swizzlelab check examples/xcd_chunked.py --grid 1003 --target mi300x
pid = tl.program_id(0)
num_xcds = 8
num_blocks = tl.num_programs(0)
per_xcd = num_blocks // num_xcds
extra = num_blocks % num_xcds
xcd_id = pid % num_xcds
local_block_id = pid // num_xcds
pid = xcd_id * per_xcd + tl.minimum(xcd_id, extra) + local_block_id
