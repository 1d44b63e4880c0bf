#!/bin/sh
# matmul 8192^3 on the H100: simulator-ranked orders (wave-aware families included) measured with ncu, the one
# with the fewest DRAM reads timed against grouped-8. One GPU-host call (also writes the sim validation rows):
#   python -m benchmarks.sim_gpu.run "$OUT" --deadline-s 265 --wave 'wave:GROUP_M=16,BLOCK_N=16;grouped_serpentine:GROUP_M=16'
# then optimize_matmul.json from $OUT is summarised into optimize_matmul_h100.json here.
exec python -m benchmarks.sim_gpu.run "${1:?usage: run.sh OUT_DIR}" --deadline-s 265 \
    --wave 'wave:GROUP_M=16,BLOCK_N=16;grouped_serpentine:GROUP_M=16'
