"""Which L2 domain each program of a launch runs in under a model's dispatch policy (in order on one domain, or
round-robin over AMD XCDs), and how the tiles of an order spread over the domains."""

from __future__ import annotations

import numpy as np

from swizzlelab.hw.model import HardwareModel


def launch_domains(n_programs: int, model: HardwareModel) -> np.ndarray:
    """The L2 domain each launch index runs in: i mod n_domains under round-robin dispatch (AMD XCDs), else 0."""
    launch = np.arange(int(n_programs), dtype=np.int64)
    if model.dispatch == "round_robin_domains":
        return launch % model.n_domains
    return np.zeros_like(launch)


def domain_programs(perm: np.ndarray, model: HardwareModel) -> list[np.ndarray]:
    """Tiles each L2 domain runs, in the order its slots receive them (`perm[launch index] = tile`)."""
    if model.dispatch == "round_robin_domains":
        # Launch index i goes to domain i mod n_domains, in increasing i within a domain.
        return [perm[d :: model.n_domains] for d in range(model.n_domains)]
    return [perm] + [perm[:0]] * (model.n_domains - 1)


def domain_sharing(perm: np.ndarray, grid: tuple[int, ...], model: HardwareModel) -> list[dict[str, float]]:
    """Per L2 domain, the tiles its programs cover: on a 1-D grid how many contiguous runs, on a 2-D grid how
    many distinct tile rows and columns (fewer means more lines shared inside the domain)."""
    n_cols = grid[1] if len(grid) == 2 else 1
    table: list[dict[str, float]] = []
    for d, tiles in enumerate(domain_programs(perm, model)):
        n_tiles = int(tiles.size)
        if len(grid) == 1:
            ordered = np.sort(tiles)
            runs = int(np.count_nonzero(np.diff(ordered) != 1)) + 1 if n_tiles else 0
            table.append({"domain": d, "tiles": n_tiles, "contiguous_runs": runs,
                          "first_tile": int(ordered[0]) if n_tiles else -1,
                          "last_tile": int(ordered[-1]) if n_tiles else -1})
            continue
        n_rows = int(np.unique(tiles // n_cols).size)
        n_cols_d = int(np.unique(tiles % n_cols).size)
        table.append({"domain": d, "tiles": n_tiles, "distinct_rows": n_rows, "distinct_cols": n_cols_d,
                      "tiles_per_row": n_tiles / max(n_rows, 1), "tiles_per_col": n_tiles / max(n_cols_d, 1)})
    return table
