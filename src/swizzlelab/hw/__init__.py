"""Hardware models of GPUs for the L2 simulator: unit counts, L2 domains and sizes, dispatch policy.

One module per vendor (nvidia, amd) beside the model class (model), dispatch (dispatch) and --target names
(targets); every public name is importable from here. Each model's `source` names the public documents its figures
come from.
"""

from swizzlelab.hw.amd import MI300X, MI325X, MI355X
from swizzlelab.hw.dispatch import domain_programs, domain_sharing, launch_domains
from swizzlelab.hw.model import MB, SET_MAPS, HardwareModel, variant
from swizzlelab.hw.nvidia import (
    H100_SXM,
    H200_SXM,
    HOPPER_SM,
    SmLimits,
    from_torch_device,
    generic_nvidia,
    measured_occupancy,
    nvidia_blocks_per_sm,
)
from swizzlelab.hw.targets import (
    MODELS,
    TARGETS,
    Target,
    get_model,
    known_names,
    local_gpu_name,
    resolve_target,
    same_gpu,
    targets_help,
)

__all__ = [
    "H100_SXM", "H200_SXM", "HOPPER_SM", "MB", "MI300X", "MI325X", "MI355X", "MODELS", "SET_MAPS", "TARGETS",
    "HardwareModel", "SmLimits", "Target", "domain_programs", "domain_sharing", "from_torch_device", "generic_nvidia",
    "get_model", "known_names", "launch_domains", "local_gpu_name", "measured_occupancy", "nvidia_blocks_per_sm",
    "resolve_target", "same_gpu", "targets_help", "variant",
]
