"""L2 simulator and memory analysis of access traces under a launch order (swizzle) on a hardware model.

`simulate(trace, perm, hw)` predicts hit rates and DRAM bytes; `analyze(trace, hw, perm)` explains sharing.
"""

from swizzlelab.sim.analyze import (Analysis, FirstWave, Period, Sharing, TensorStats, analyze, first_wave,
                                    index_periods)
from swizzlelab.sim.simulate import (DomainStats, Schedule, SimResult, clear_schedule_cache, domain_programs,
                                     footprint_of, own_schedule, simulate, simulate_many)

__all__ = [
    "Analysis",
    "DomainStats",
    "FirstWave",
    "Period",
    "Schedule",
    "Sharing",
    "SimResult",
    "TensorStats",
    "analyze",
    "clear_schedule_cache",
    "domain_programs",
    "first_wave",
    "footprint_of",
    "index_periods",
    "own_schedule",
    "simulate",
    "simulate_many",
]
