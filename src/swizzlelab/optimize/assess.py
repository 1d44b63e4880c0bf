"""Judge a proven order without a GPU: predict its L2 behaviour, and the co-residency statistics (what the first
wave of programs reads together) that reasons are written from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.optimize.records import Prediction, Wave
from swizzlelab.scenario import Scenario
from swizzlelab.sim import Engine, SimParams, first_wave, simulate


def predict(scenario: Scenario, perm: np.ndarray, footprint: Any = None, engine: Engine | str = "auto",
            params: SimParams | None = None) -> Prediction:
    """Predicted L2 figures of running the tiles in order `perm` on the target model (`footprint`: the trace's,
    computed once per run; `engine`: simulate()'s, the same figures on each, an estimate from a sample of the L2
    sets where its set_fraction < 1; `params`: the progress model's, default the target's; see sim.simulate)."""
    model = scenario.model
    result = simulate(scenario.trace_for(perm), perm, model, params, engine, occupancy=scenario.occupancy.programs,
                      footprint=footprint, wave_sync=scenario.wave_sync)
    dram = result.dram_read_bytes + result.dram_write_bytes
    return Prediction(
        model=result.model,
        occupancy=int(result.occupancy),
        l2_hit_rate=float(result.l2_hit_rate),
        line_hit_rate=float(result.line_hit_rate),
        dram_read_bytes=int(result.dram_read_bytes),
        dram_write_bytes=int(result.dram_write_bytes),
        compulsory_bytes=int(result.compulsory_bytes),
        requested_bytes=int(result.requested_bytes),
        best_hit_rate=float(result.best_hit_rate),
        per_domain_hit_rate=tuple(float(rate) for rate in result.domain_hit_rates()),
        predicted_dram_ms=1e3 * dram / model.dram_bw_bytes_per_s if model.dram_bw_bytes_per_s else None,
        sim_s=float(result.elapsed_s),
        l2_miss_read_bytes=int(result.l2_miss_read_bytes),
        llc_hit_rate=result.llc_hit_rate,
        set_fraction=float(result.set_fraction),
        fabric_bytes=int(result.fabric_bytes),
        partial_write_bytes=int(result.partial_write_bytes),
    )


def wave_stats(scenario: Scenario, perm: np.ndarray) -> Wave:
    """Co-residency statistics of the first wave of `perm` on the target model (from the trace)."""
    model = scenario.model
    trace = scenario.trace
    slots = model.units_per_domain * scenario.occupancy.programs
    wave = first_wave(trace, perm, model, scenario.occupancy.programs)
    waves, per_tile, per_domain = wave.waves, wave.tile_lines, wave.domain_lines
    domain = np.repeat(np.arange(len(waves), dtype=np.int64), [w.size for w in waves])
    n_multi, n_all = wave.shared_lines, wave.all_lines
    sharing = [
        per_tile[domain == d].sum() / per_domain[d] if per_domain[d] else 1.0 for d in range(len(waves))
    ]
    rows = [np.unique(w // scenario.grid[1]).size for w in waves] if scenario.rank == 2 else []
    cols = [np.unique(w % scenario.grid[1]).size for w in waves] if scenario.rank == 2 else []
    line_bytes = int(trace.line_bytes)
    return Wave(
        wave_programs=int(slots),
        n_domains=len(waves),
        distinct_bytes=int(per_domain.mean() * line_bytes),
        program_bytes=int(per_tile.mean() * line_bytes) if per_tile.size else 0,
        sharing=float(np.mean(sharing)),
        cross_domain_fraction=float(n_multi / n_all) if n_all and len(waves) > 1 else 0.0,
        rows=float(np.mean(rows)) if rows else 0.0,
        cols=float(np.mean(cols)) if cols else 0.0,
        l2_bytes_per_domain=int(model.l2_effective_bytes_per_domain),
    )
