"""L2 simulator and memory analysis of access traces under a launch order (swizzle) on a hardware model.

`simulate(trace, perm, hw, params, engine)` predicts hit rates and DRAM bytes; `analyze(trace, hw, perm)` explains
sharing.
"""

from swizzlelab.hw import domain_programs
from swizzlelab.sim.analyze import (Analysis, FirstWave, Period, Sharing, TensorStats, analyze, first_wave,
                                    index_periods, periods_by_traffic)
from swizzlelab.sim.params import CacheGeometry, Engine, SimParams
from swizzlelab.sim.result import DomainStats, Schedule, SimResult
from swizzlelab.sim.schedule import clear_schedule_cache, own_schedule
from swizzlelab.sim.setup import default_workers, footprint_of
from swizzlelab.sim.simulate import simulate, simulate_many, side_by_side

__all__ = [
    "Analysis",
    "CacheGeometry",
    "DomainStats",
    "Engine",
    "FirstWave",
    "Period",
    "Schedule",
    "Sharing",
    "SimParams",
    "SimResult",
    "TensorStats",
    "analyze",
    "clear_schedule_cache",
    "default_workers",
    "domain_programs",
    "first_wave",
    "footprint_of",
    "index_periods",
    "own_schedule",
    "periods_by_traffic",
    "side_by_side",
    "simulate",
    "simulate_many",
]
