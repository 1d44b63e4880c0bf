"""Hardware models of GPUs for the L2 simulator: unit counts, L2 domains and sizes, dispatch policy.

Each model is a frozen dataclass whose `source` names the public documents its figures come from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.runtime import device

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
    # How a line's L2 set and home partition are chosen (SET_MAPS; sim.kernels._set_and_home): "hash" (each a hash
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
    # launches (benchmarks/lab/chips.py), not fitted. 0 = no SM pace.
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


H100_SXM = HardwareModel(
    name="H100-SXM",
    vendor="nvidia",
    n_units=132,
    n_domains=1,
    units_per_domain=132,
    l2_bytes_per_domain=50 * MB,
    line_bytes=128,
    sector_bytes=32,
    dispatch="in_order",
    dram_bw_bytes_per_s=3.35e12,
    source=(
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): 132 SMs (SXM5), 50 MB L2 in two "
        "partitions (each SM's near partition also caches lines homed in the far one); NVIDIA H100 datasheet: 3.35 TB/s HBM3; CUDA C++ Best Practices / ncu docs: 128-byte "
        "lines of four 32-byte sectors"
    ),
    l2_partitions=2,
    # ncu on H100 and H200 (benchmarks/sim_validation): a transpose whose tiles read 16 bytes per row reads 4x
    # its bytes from DRAM when no neighbour reuses them, and spmv's random gathers read ~1.7x the missed sectors.
    dram_fetch_bytes=64,
    # GH100 has 8 GPCs of up to 9 TPCs (18 SMs); an H100 SXM keeps 66 TPCs and which ones are fused off differs by
    # chip. %smid timelines of every program (benchmarks/lab/chips.py, sim_validation README "The chip sets the
    # schedule") found on three of the four H100s measured 24 SMs that run 12-14% faster in L2-bound runs
    # (grouped-8 orders) and at the others' pace in DRAM-bound ones: two GPCs of 6 TPCs, so 12, 12, 18 x 6, with a
    # GPC share of 0.34-0.39 (0.35 here). The fourth (timeline_h100.json) had one small GPC (12, 16 x 3, 18 x 4)
    # and a share of 0.55. With this layout the saturating model ranks the older validation table's DRAM reads as ncu
    # does in 15 of 16 held-out cases (13 of 16 with the fourth chip's layout and share 0.5; README there, stop 35).
    gpc_sms=(12, 12, 18, 18, 18, 18, 18, 18),
    gpc_bound=0.35,
    aliases=("h100", "h100-sxm", "h100_sxm", "h100sxm"),
)

def _variant(base: HardwareModel, **changes: object) -> HardwareModel:
    """A sibling of `base` (same die family): only what differs is written out; the effective L2 capacity is
    derived again from the new physical one."""
    return replace(base, l2_effective_bytes_per_domain=0, **changes)  # type: ignore[arg-type]


H200_SXM = _variant(
    H100_SXM,
    name="H200-SXM",
    l2_bytes_per_domain=60 * MB,
    dram_bw_bytes_per_s=4.8e12,
    source=(
        "NVIDIA H200 datasheet (2024): GH100 with 132 SMs, 141 GB HBM3e at 4.8 TB/s; L2 60 MiB as the device "
        "reports it (torch L2_cache_size 62,914,560 on an H200 SXM, benchmarks/sim_validation)"
    ),
    # Two H200s measured (benchmarks/lab/chips.py): 12, 16 x 3, 18 x 4 with share 0.04 and 12, 12, 18 x 6 with
    # 0.08; a third showed no faster SMs. The H200's SMs keep nearly one pace (its L2 paths are not the bound), so the
    # layout matters little; 0.05 is the measured chips' middle.
    gpc_sms=(12, 16, 16, 16, 18, 18, 18, 18),
    gpc_bound=0.05,
    # Fitted on the validation table's fit rows (square matmul; benchmarks/sim_validation, README "Page noise") and
    # adopted for the H200 alone on a set measured after its rule was committed: there its cases below tau 0.8 went
    # from 3 of 6 to none and its DRAM error from 13.1% to 6.6% (over the whole table row-major's reads, 11-46% low
    # before, are 31% low to 48% high: it ranks them but overshoots the largest squares). The H100's rows got worse
    # with it, on the table and on the same set measured on an H100 (its programs keep together in both orders): 0.
    page_noise=0.9,
    aliases=("h200", "h200-sxm", "h200_sxm"),
)

MI300X = HardwareModel(
    name="MI300X",
    vendor="amd",
    n_units=304,
    n_domains=8,
    units_per_domain=38,
    l2_bytes_per_domain=4 * MB,
    line_bytes=128,
    sector_bytes=32,
    dispatch="round_robin_domains",
    dram_bw_bytes_per_s=5.3e12,
    source=(
        "AMD CDNA 3 architecture whitepaper (2023) and AMD Instinct MI300X datasheet: 304 CUs in 8 XCDs of 38, "
        "4 MB L2 per XCD with 128-byte lines, 256 MB Infinity Cache, 5.3 TB/s HBM3; ROCm docs (workgroup "
        "dispatch): workgroup i goes to XCD i mod 8"
    ),
    llc_bytes=256 * MB,
    aliases=("mi300x", "mi300"),
)

MI325X = _variant(
    MI300X,
    name="MI325X",
    dram_bw_bytes_per_s=6.0e12,
    source=(
        "AMD Instinct MI325X datasheet (2024): same CDNA 3 compute die as MI300X (304 CUs, 8 XCDs of 38, 4 MB "
        "L2 per XCD, 256 MB Infinity Cache), 256 GB HBM3E at 6 TB/s"
    ),
    aliases=("mi325x", "mi325"),
)

MI355X = _variant(
    MI300X,
    name="MI355X",
    n_units=256,
    units_per_domain=32,
    dram_bw_bytes_per_s=8.0e12,
    source=(
        "AMD CDNA 4 architecture whitepaper (2025) and MI355X datasheet: 256 CUs in 8 XCDs of 32, 4 MB L2 per "
        "XCD, 256 MB Infinity Cache, 288 GB HBM3E at 8 TB/s"
    ),
    aliases=("mi355x", "mi355"),
)

MODELS: tuple[HardwareModel, ...] = (H100_SXM, H200_SXM, MI300X, MI325X, MI355X)


def known_names() -> list[str]:
    """The short names `get_model` accepts (first alias of each model)."""
    return [model.aliases[0] for model in MODELS]


# What --target accepts everywhere: every model's short name, and `auto` (the local GPU, else h100).
TARGETS: tuple[str, ...] = (*known_names(), "auto")


def targets_help() -> str:
    """'h100 | h200 | mi300x | mi325x | mi355x' for option help texts."""
    return " | ".join(known_names())


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


def get_model(name: str) -> HardwareModel:
    """The model for a short name such as 'h100' or 'mi300x' (case-insensitive); UserError if unknown."""
    if isinstance(name, HardwareModel):
        return name
    key = str(name).strip().lower()
    if key in ("cuda", "torch", "device", "auto"):
        return from_torch_device()
    for model in MODELS:
        if key == model.name.lower() or key in model.aliases:
            return model
    raise UserError(
        f"unknown hardware model '{name}': use one of {', '.join(known_names())} (or 'device' on a GPU)"
    )


def generic_nvidia(name: str, n_sms: int, l2_bytes: int, dram_bw_bytes_per_s: float = 0.0) -> HardwareModel:
    """A one-domain NVIDIA model from an SM count and an L2 size (e.g. as reported by the driver)."""
    if n_sms <= 0 or l2_bytes <= 0:
        raise UserError(f"generic NVIDIA model needs a positive SM count and L2 size, got {n_sms}, {l2_bytes}")
    return HardwareModel(
        name=name,
        vendor="nvidia",
        n_units=n_sms,
        n_domains=1,
        units_per_domain=n_sms,
        l2_bytes_per_domain=int(l2_bytes),
        line_bytes=128,
        sector_bytes=32,
        dispatch="in_order",
        dram_bw_bytes_per_s=dram_bw_bytes_per_s,
        source="torch.cuda.get_device_properties (multi_processor_count, L2_cache_size)",
        l2_partitions=2 if n_sms % 2 == 0 else 1,
        aliases=(name.lower(),),
    )


def from_torch_device(index: int = 0) -> HardwareModel:
    """A model of the visible CUDA GPU; a known model (with its sources) when the name matches one."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is a dependency
        raise NoGpuError("torch is not importable: install torch to read the GPU's properties") from err
    if not torch.cuda.is_available():
        raise NoGpuError("no CUDA GPU visible: pass --target h100|h200|mi300x instead of the device model")
    props = torch.cuda.get_device_properties(index)
    gpu_name = str(props.name)
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
    lowered = gpu_name.lower()
    for model, marker in ((H100_SXM, "h100"), (H200_SXM, "h200")):
        if marker in lowered and props.multi_processor_count == model.n_units:
            if l2_bytes and l2_bytes != model.l2_bytes_per_domain:
                return replace(model, l2_bytes_per_domain=l2_bytes, l2_effective_bytes_per_domain=l2_bytes)
            return model
    return generic_nvidia(gpu_name, int(props.multi_processor_count), l2_bytes or 40 * MB)


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resource limits that bound resident blocks (CUDA occupancy rules)."""

    regs_per_sm: int = 65536
    reg_alloc_unit_per_warp: int = 256  # registers are granted to a warp in blocks of 256 (8 per thread)
    smem_per_sm_bytes: int = 233472  # 228 KiB on Hopper
    smem_reserved_per_block_bytes: int = 1024  # the driver keeps 1 KiB per resident block
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    source: str = "CUDA C++ Programming Guide, compute capability 9.0 table; CUDA occupancy calculator rules"


HOPPER_SM = SmLimits()


def nvidia_blocks_per_sm(n_regs: int, shared_bytes: int, num_warps: int, limits: SmLimits = HOPPER_SM) -> int:
    """Resident programs per SM of a compiled kernel (registers per thread, shared memory per block, warps)."""
    if n_regs < 0 or shared_bytes < 0 or num_warps < 1:
        raise UserError(f"kernel resources must be non-negative with >= 1 warp, got {n_regs}, {shared_bytes}, {num_warps}")
    unit = limits.reg_alloc_unit_per_warp
    regs_per_warp = -(-max(n_regs, 1) * 32 // unit) * unit
    by_regs = limits.regs_per_sm // (regs_per_warp * num_warps)
    by_smem = limits.smem_per_sm_bytes // (shared_bytes + limits.smem_reserved_per_block_bytes)
    by_threads = limits.max_threads_per_sm // (32 * num_warps)
    blocks = min(by_regs, by_smem, by_threads, limits.max_blocks_per_sm)
    if blocks < 1:
        raise UserError(
            f"a block of {num_warps} warps with {n_regs} registers/thread and {shared_bytes} bytes of shared memory "
            "does not fit on one SM"
        )
    return blocks


@dataclass(frozen=True)
class Target:
    """The hardware model predictions use, and whether this machine can measure on it."""

    model: HardwareModel
    requested: str
    note: str  # one line saying how the target was chosen
    local_gpu: str  # torch's name of the local CUDA GPU, "" when there is none
    can_measure: bool

    @property
    def short_name(self) -> str:
        return (self.model.aliases or (self.model.name.lower(),))[0]


def local_gpu_name() -> str:
    """The CUDA GPU kernels run on here, or '' (no GPU, or the interpreter is forced)."""
    if device() != "cuda":
        return ""
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


def same_gpu(model: HardwareModel, gpu_name: str) -> bool:
    """Whether the local GPU (torch's name) is the kind `model` describes."""
    lowered = gpu_name.lower()
    if model.name.lower() == lowered:
        return True
    tokens = {model.name.lower().split("-")[0]} | {a.split("-")[0].split("_")[0] for a in model.aliases}
    return any(token and token in lowered for token in tokens)


def resolve_target(requested: str, gpu_name: str | None = None) -> Target:
    """The hardware model for --target; 'auto' takes the local GPU's model, else h100 (said in `note`).
    `gpu_name` stands for the local GPU ('' = none); None asks torch."""
    key = str(requested).strip().lower()
    aliases = {alias: model for model in MODELS for alias in (model.name.lower(), *model.aliases)}
    if key != "auto" and key not in aliases:
        raise UserError(f"--target {requested!r} is unknown: use one of {', '.join(TARGETS)}")
    gpu = local_gpu_name() if gpu_name is None else gpu_name
    if key == "auto":
        if gpu:
            model = from_torch_device()
            note = f"target auto: the local GPU {gpu} (model {model.name})"
        else:
            model = H100_SXM
            note = f"target auto: no CUDA GPU here, predicting for {model.name}"
    else:
        model = aliases[key]
        note = f"target {model.name}"
    can_measure = bool(gpu) and same_gpu(model, gpu)
    if gpu and not can_measure:
        note += f" (the local GPU {gpu} is not a {model.name}: predictions only, nothing measured)"
    elif not gpu:
        note += " (no CUDA GPU: every figure is a prediction)"
    return Target(model=model, requested=key, note=note, local_gpu=gpu, can_measure=can_measure)


def measured_occupancy(limits: list[float | None], resources: dict | None, fallback: int) -> tuple[int, str]:
    """(programs per SM, source): the smallest of ncu's launch__occupancy_limit_* values, else the occupancy of
    the compiled kernel's resources (n_regs, shared_bytes, num_warps), else `fallback`."""
    known = [v for v in limits if v is not None and v > 0]
    if known:
        return int(min(known)), "ncu launch__occupancy_limit_*"
    if resources:
        return nvidia_blocks_per_sm(resources["n_regs"], resources["shared_bytes"], resources["num_warps"]), \
            "compiled kernel"
    return fallback, "given (--occupancy)"
