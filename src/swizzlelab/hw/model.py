"""The hardware model the L2 simulator reads: a frozen dataclass of one GPU's unit counts, L2 domains and sizes,
dispatch policy and the public documents its figures come from; `variant` writes a sibling of the same die."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from swizzlelab.errors import UserError

MB = 1024 * 1024
SET_MAPS = ("hash", "interleave", "permute")  # how a line's L2 set and home are chosen (HardwareModel.l2_set_map)


@dataclass(frozen=True)
class HardwareModel:
    """One GPU as the simulator sees it: L2 domains, the units feeding each, and how programs are dispatched.

    `l2_bytes_per_domain` is the physical L2 of a domain, split into `l2_partitions` equal partitions (2 on
    Hopper: each SM sits next to one partition, which also keeps copies of lines homed in the other one, so
    data can be held twice). `l2_effective_bytes_per_domain` is the capacity the simulator uses: the
    physical one unless a study overrides it (`with_l2_effective_bytes`).
    """

    name: str
    vendor: str
    n_units: int
    n_domains: int
    units_per_domain: int
    l2_bytes_per_domain: int
    line_bytes: int
    sector_bytes: int
    dispatch: str  # "in_order" | "round_robin_domains"
    dram_bw_bytes_per_s: float
    source: str
    l2_partitions: int = 1
    l2_effective_bytes_per_domain: int = 0
    llc_bytes: int = 0  # a memory-side cache shared by all domains (AMD Infinity Cache / MALL), fed by L2 misses
    # Ways per L2 set (hashed set index). Not published for H100/H200 or MI300X; 16 is the usual figure for
    # GPU L2s (measured on V100 and A100 by microbenchmarks) and the simulator's results change little above it.
    l2_ways: int = 16
    # How a line's L2 set and home partition are chosen (SET_MAPS; sim.kernels.setmap._set_and_home): "hash" (each a hash
    # of the line), "interleave" (each block of sets x partitions consecutive lines takes the slots in turn from a
    # hashed offset) or "permute" (in a pseudo-random order of the block's own). On an H100
    # (benchmarks/sim_validation/dup_probe_*.json) a contiguous buffer that every SM sweeps again and again is kept
    # whole up to 24 MiB and lost from 28 MiB, a sharp cliff that "interleave" and "permute" give and "hash"
    # smears; the same sweeps over 128- or 256-byte rows 8 or 32 KiB apart lose lines gradually from 16 MiB, as
    # "hash" and "permute" predict. Yet on the validation table's real kernels "hash" stays the best (held-out hit
    # MAE 1.82 pp; "permute" 2.22, "interleave" 2.72: sim_validation_permute.json, sim_validation_interleave.json),
    # so every model keeps it until a model explains both (figures of stop 31's defaults).
    l2_set_map: str = "hash"
    # Bytes a read miss brings from DRAM: one sector, or the aligned pair of sectors around it (64 B on Hopper:
    # measured with ncu on H100 and H200, benchmarks/sim_validation; docs/hit-rates.md).
    dram_fetch_bytes: int = 32
    # SMs of each GPC, whose programs share the GPC's path to L2: where a kernel is bound by L2 bandwidth, an SM
    # of a smaller GPC runs faster (the simulator's saturating progress model, sim.params). Empty = unknown.
    gpc_sms: tuple[int, ...] = ()
    # The share of a step's time its GPC's bandwidth sets while an L2-bound kernel leaves DRAM idle (an SM's pace is
    # 1 - gpc_bound + gpc_bound x its GPC's SMs / their mean; the saturating progress model). Read from a chip's
    # launches (git 305b79c:benchmarks/lab/chips.py), not fitted. 0 = no SM pace.
    gpc_bound: float = 0.0
    # The spread of the time of a step whose read misses share DRAM pages with other reads of its step (the contention
    # progress model's page_noise; sim.params, beside DRAM_PAGE_BYTES, says why). 0 = none.
    page_noise: float = 0.0
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.l2_effective_bytes_per_domain == 0:
            object.__setattr__(self, "l2_effective_bytes_per_domain", self.l2_bytes_per_domain)
        if self.dispatch not in ("in_order", "round_robin_domains"):
            raise UserError(f"hardware model {self.name}: dispatch must be in_order or round_robin_domains")
        if self.n_domains * self.units_per_domain != self.n_units:
            raise UserError(f"hardware model {self.name}: n_domains x units_per_domain must equal n_units")
        if self.l2_partitions < 1 or self.units_per_domain % self.l2_partitions:
            raise UserError(f"hardware model {self.name}: units per domain must split evenly over L2 partitions")
        if self.dram_fetch_bytes not in (self.sector_bytes, 2 * self.sector_bytes):
            raise UserError(f"hardware model {self.name}: dram_fetch_bytes must be one or two sectors")
        if self.line_bytes % self.sector_bytes or self.line_bytes // self.sector_bytes > 8:
            raise UserError(f"hardware model {self.name}: a line must hold 1..8 whole sectors")
        if self.l2_set_map not in SET_MAPS:
            raise UserError(f"hardware model {self.name}: l2_set_map must be one of {', '.join(SET_MAPS)}")
        if self.gpc_sms and min(self.gpc_sms) < 1:
            raise UserError(f"hardware model {self.name}: every GPC needs at least one SM")
        if not 0.0 <= self.gpc_bound < 1.0:
            raise UserError(f"hardware model {self.name}: gpc_bound must be a share in 0..1 (1 excluded)")
        if not 0.0 <= self.page_noise <= 1.0:
            raise UserError(f"hardware model {self.name}: page_noise must be in 0..1")
        if sum(self.gpc_sms) != self.units_per_domain:
            # A variant with another unit count (a study's smaller GPU) has GPCs nobody measured.
            object.__setattr__(self, "gpc_sms", ())

    @property
    def sectors_per_line(self) -> int:
        return self.line_bytes // self.sector_bytes

    @property
    def l2_lines_per_partition(self) -> int:
        """Capacity in lines the simulator uses for each partition of a domain (the effective capacity)."""
        return max(1, self.l2_effective_bytes_per_domain // self.l2_partitions // self.line_bytes)

    @property
    def l2_total_bytes(self) -> int:
        return self.l2_bytes_per_domain * self.n_domains

    def with_l2_effective_bytes(self, effective_bytes: int) -> "HardwareModel":
        """A copy with another effective capacity per domain (for calibration studies)."""
        if effective_bytes <= 0:
            raise UserError("effective L2 capacity must be a positive number of bytes")
        return replace(self, l2_effective_bytes_per_domain=int(effective_bytes))

    def to_dict(self) -> dict:
        return asdict(self)


def variant(base: HardwareModel, **changes: object) -> HardwareModel:
    """A sibling of `base` (same die family): only what differs is written out; the effective L2 capacity is
    derived again from the new physical one."""
    return replace(base, l2_effective_bytes_per_domain=0, **changes)  # type: ignore[arg-type]
