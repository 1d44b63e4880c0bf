"""The case sets of benchmarks/sim_validation: (task, case, orders, profiled kernel) of the table and of the sets
measured later to test a model choice (fresh, page, pace), each committed before it was measured.
"""

from __future__ import annotations

from typing import Any

# (task, case, orders, name of the profiled kernel). Orders are chosen so that they differ in predicted L2 hit.
# Square matmul cases come first: they are the fit set.
CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 11, "m": 4096, "n": 4096, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "hilbert:SIDE=8", "diagonal"], "matmul_kernel"),
    ("matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192},
     ["grouped:GROUP_M=8", "row_major", "grouped:GROUP_M=16", "column_major", "hilbert:SIDE=32"], "matmul_kernel"),
    # Tiles 64 x 8 fp16: each reads 16 bytes (half a sector) of 64 rows of x, so neighbours along n share sectors.
    ("transpose", {"seed": 13, "m": 1048576, "n": 64, "dtype": "float16", "tile_n": 8},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=4096", "diagonal"], "transpose_kernel"),
    # Short contexts and 4 waves of programs: the query heads of one KV group run together under some orders only.
    ("lean_attention", {"seed": 0, "batch": 16, "heads": 64, "kv_heads": 8, "head_dim": 128, "min_ctx": 512,
                        "max_ctx": 2048, "n_programs": 1056},
     ["identity1d", "stride:STRIDE=2", "stride:STRIDE=8", "stride:STRIDE=64", "stride:STRIDE=132"],
     "lean_attention_kernel"),
    ("histogram", {"seed": 11, "rows": 1048576, "channels": 512},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal"], "histogram_kernel"),
    ("spmv", {"seed": 11, "rows": 1048576, "cols": 33554432, "avg_nnz": 32, "communities": 64},
     ["identity1d", "stride:STRIDE=64", "stride:STRIDE=2", "stride:STRIDE=16", "stride:STRIDE=4096"], "spmv_kernel"),
    ("flash_attention", {"seed": 0, "batch": 1, "heads": 16, "seq": 8192, "head_dim": 128},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal", "hilbert:SIDE=8"], "flash_attention_kernel"),
    ("matmul", {"seed": 14, "m": 4096, "n": 16384, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], "matmul_kernel"),
    ("matmul", {"seed": 15, "m": 16384, "n": 4096, "k": 8192},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], "matmul_kernel"),
    ("matmul", {"seed": 16, "m": 16384, "n": 16384, "k": 4096},
     ["row_major", "grouped:GROUP_M=8", "column_major"], "matmul_kernel"),
]

# A fresh test set (stop 35), chosen and committed before any of it was measured: shapes none of the tables above
# holds, none square (so validate.py never fits on them), orders of the table above. It decides between the
# saturating and the contention progress model by the rule in fresh/fresh_test.json (README, "Progress models").
FRESH_ORDERS = ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"]

FRESH_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 21, "m": 4096, "n": 4096, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 22, "m": 6144, "n": 6144, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 23, "m": 8192, "n": 16384, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 24, "m": 12288, "n": 12288, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 25, "m": 16384, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 26, "m": 8192, "n": 8192, "k": 16384}, [*FRESH_ORDERS, "hilbert:SIDE=32"], "matmul_kernel"),
    ("flash_attention", {"seed": 1, "batch": 2, "heads": 16, "seq": 8192, "head_dim": 128},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal", "hilbert:SIDE=8"], "flash_attention_kernel"),
]

# The page-noise test set (stop 38), committed before any of it was measured: square and rectangular matmul shapes no
# set above holds, where streaming orders read several times what fits in L2. Its rule: page/page_test.json.
PAGE_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 31, "m": 8192, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 32, "m": 10240, "n": 10240, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 33, "m": 14336, "n": 14336, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 34, "m": 12288, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 35, "m": 8192, "n": 12288, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 36, "m": 10240, "n": 10240, "k": 8192}, FRESH_ORDERS, "matmul_kernel"),
]

# The program-pace test set (stop 39), committed before any of it was measured: matmul shapes no set above holds, from
# the cliff of 4096^2x8192 (5120^2x8192) to the large squares. Its rule: pace/pace_test.json.
PACE_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 41, "m": 5120, "n": 5120, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 42, "m": 6144, "n": 6144, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 43, "m": 7168, "n": 7168, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 44, "m": 9216, "n": 9216, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 45, "m": 11264, "n": 11264, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 46, "m": 8192, "n": 6144, "k": 8192}, FRESH_ORDERS, "matmul_kernel"),
]

CASE_SETS = {"table": CASES, "fresh": FRESH_CASES, "page": PAGE_CASES, "pace": PACE_CASES}
