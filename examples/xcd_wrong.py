# A formula found in the wild: breaks when the block count is not a multiple of 8.
# Run: swizzlelab check examples/xcd_wrong.py --grid 1003   (exit 1: not a bijection, with examples)
pid = tl.program_id(0)
num_xcds = 8
total = tl.num_programs(0)
xcd = pid % num_xcds
pid = xcd * (total // 8) + pid // 8
