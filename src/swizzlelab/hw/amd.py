"""AMD GPUs: the MI300X model (eight XCDs, each with its own L2, workgroups dealt round-robin over them) and its
CDNA 3/4 siblings MI325X and MI355X."""

from __future__ import annotations

from swizzlelab.hw.model import MB, HardwareModel, variant


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

MI325X = variant(
    MI300X,
    name="MI325X",
    dram_bw_bytes_per_s=6.0e12,
    source=(
        "AMD Instinct MI325X datasheet (2024): same CDNA 3 compute die as MI300X (304 CUs, 8 XCDs of 38, 4 MB "
        "L2 per XCD, 256 MB Infinity Cache), 256 GB HBM3E at 6 TB/s"
    ),
    aliases=("mi325x", "mi325"),
)

MI355X = variant(
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
