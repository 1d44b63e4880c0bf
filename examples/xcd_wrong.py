# A formula found in the wild: breaks when the block count is not a multiple of 8.
pid = tl.program_id(0)
num_xcds = 8
total = tl.num_programs(0)
xcd = pid % num_xcds
pid = xcd * (total // 8) + pid // 8
