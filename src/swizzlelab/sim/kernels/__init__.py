"""Numba kernels of the L2 simulator, one import point for the Python layer (swizzlelab.sim.simulate and engines):
the set map, the progress model, the serial and the set-partitioned LRU engines, the coalescer, their tables.

Pure array code: the Python layer validates inputs and builds the records. Each module holds one part:
setmap (where a line lives), tables (key maps), progress (schedules), lru (run_domain), groups (run_share,
run_groups and the group CSR), coalesce (the request coalescer, footprint); sim.walk is the per-set walk both
the CPU and the GPU engines compile.
"""

from __future__ import annotations

from swizzlelab.sim.kernels.coalesce import coalesce_groups, coalesce_reads, footprint
from swizzlelab.sim.kernels.groups import (
    PREFETCH_STEPS,
    gather_spans,
    group_counts,
    group_fill,
    merge_by_time,
    run_groups,
    run_groups_for,
    run_share,
    step_access_counts,
    step_miss_counts,
    stream_misses,
)
from swizzlelab.sim.kernels.lru import run_domain
from swizzlelab.sim.kernels.progress import (
    sample_accesses,
    sample_page_share,
    schedule_domain,
    schedule_saturating,
    step_duration,
)
from swizzlelab.sim.kernels.setmap import home_partition, near_partition, popcount_table, set_index_of
from swizzlelab.sim.kernels.tables import MAX_DIRECT_KEYS, MAX_KEY, MAX_NODES, NODE_BITS
from swizzlelab.sim.walk import (
    N_STATS,
    ST_DRAM_READ_SECTORS,
    ST_DRAM_WRITE_SECTORS,
    ST_EVICTIONS,
    ST_FABRIC_SECTORS,
    ST_HIT_SECTORS,
    ST_LINE_ACCESSES,
    ST_LINE_HITS,
    ST_LINE_LOOKUPS,
    ST_LOOKUP_SECTORS,
    ST_PROGRAMS,
    ST_REQ_SECTORS,
    ST_TCC_HITS,
    ST_WRITEBACK_LINES,
)

__all__ = [
    "MAX_DIRECT_KEYS", "MAX_KEY", "MAX_NODES", "NODE_BITS", "N_STATS", "PREFETCH_STEPS", "ST_DRAM_READ_SECTORS",
    "ST_DRAM_WRITE_SECTORS", "ST_EVICTIONS", "ST_FABRIC_SECTORS", "ST_HIT_SECTORS", "ST_LINE_ACCESSES", "ST_LINE_HITS",
    "ST_LINE_LOOKUPS", "ST_LOOKUP_SECTORS", "ST_PROGRAMS", "ST_REQ_SECTORS", "ST_TCC_HITS", "ST_WRITEBACK_LINES",
    "coalesce_groups",
    "coalesce_reads", "footprint", "gather_spans", "group_counts", "group_fill", "home_partition",
    "merge_by_time", "near_partition", "popcount_table", "run_domain", "run_groups", "run_groups_for", "run_share",
    "sample_accesses", "sample_page_share", "schedule_domain", "schedule_saturating", "set_index_of", "step_access_counts",
    "step_duration", "step_miss_counts", "stream_misses",
]
