"""NVIDIA GPUs: the H100 and H200 models, a generic model of the local CUDA GPU, and the CUDA occupancy rules that
give programs per SM from a compiled kernel's registers, shared memory and warps (or ncu's limits)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.hw.model import MB, HardwareModel, variant


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
    # chip. %smid timelines of every program (git 305b79c:benchmarks/lab/chips.py, sim_validation README "The chip
    # sets the schedule") found on three of the four H100s measured 24 SMs that run 12-14% faster in L2-bound runs
    # (grouped-8 orders) and at the others' pace in DRAM-bound ones: two GPCs of 6 TPCs, so 12, 12, 18 x 6, with a
    # GPC share of 0.34-0.39 (0.35 here). The fourth (timeline_h100.json) had one small GPC (12, 16 x 3, 18 x 4)
    # and a share of 0.55. With this layout the saturating model ranks the older validation table's DRAM reads as ncu
    # does in 15 of 16 held-out cases (13 of 16 with the fourth chip's layout and share 0.5; README there, stop 35).
    gpc_sms=(12, 12, 18, 18, 18, 18, 18, 18),
    gpc_bound=0.35,
    aliases=("h100", "h100-sxm", "h100_sxm", "h100sxm"),
)

H200_SXM = variant(
    H100_SXM,
    name="H200-SXM",
    l2_bytes_per_domain=60 * MB,
    dram_bw_bytes_per_s=4.8e12,
    source=(
        "NVIDIA H200 datasheet (2024): GH100 with 132 SMs, 141 GB HBM3e at 4.8 TB/s; L2 60 MiB as the device "
        "reports it (torch L2_cache_size 62,914,560 on an H200 SXM, benchmarks/sim_validation)"
    ),
    # Two H200s measured (git 305b79c:benchmarks/lab/chips.py): 12, 16 x 3, 18 x 4 with share 0.04 and 12, 12, 18 x 6
    # with 0.08; a third showed no faster SMs. The H200's SMs keep nearly one pace (its L2 paths are not the bound), so the
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
