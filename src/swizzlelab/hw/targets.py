"""The known models by name (--target): lookup by alias, the local GPU's model, and the Target a command predicts
for, which says whether this machine can also measure on it."""

from __future__ import annotations

from dataclasses import dataclass

from swizzlelab.errors import UserError
from swizzlelab.hw.amd import MI300X, MI325X, MI355X
from swizzlelab.hw.model import HardwareModel
from swizzlelab.hw.nvidia import H100_SXM, H200_SXM, from_torch_device
from swizzlelab.runtime import device

MODELS: tuple[HardwareModel, ...] = (H100_SXM, H200_SXM, MI300X, MI325X, MI355X)


def known_names() -> list[str]:
    """The short names `get_model` accepts (first alias of each model)."""
    return [model.aliases[0] for model in MODELS]


# What --target accepts everywhere: every model's short name, and `auto` (the local GPU, else h100).
TARGETS: tuple[str, ...] = (*known_names(), "auto")


def targets_help() -> str:
    """'h100 | h200 | mi300x | mi325x | mi355x' for option help texts."""
    return " | ".join(known_names())


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
