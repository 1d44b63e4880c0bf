pid = tl.program_id(0)
swz_GROUP_M = 16
swz_num_pid_in_group = swz_GROUP_M * num_pid_n
swz_group_id = pid // swz_num_pid_in_group
swz_first_pid_m = swz_group_id * swz_GROUP_M
swz_group_size_m = tl.minimum(num_pid_m - swz_first_pid_m, swz_GROUP_M)
pid_m = swz_first_pid_m + pid % swz_num_pid_in_group % swz_group_size_m
pid_n = pid % swz_num_pid_in_group // swz_group_size_m
