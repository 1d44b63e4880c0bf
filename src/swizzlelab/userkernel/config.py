"""Choose the constexpr values (block sizes, ...) and launch options a user kernel runs with: from
`--config NAME=VALUE,...`, else an autotune config (the one the kernel's @triton.autotune picks on a GPU, see
userkernel.autotune; the first elsewhere), else what the launch passes.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.userkernel.load import FoundKernel

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass(frozen=True)
class Choice:
    """Values forced onto every launch of the kernel (constexprs and launch options) and where they came from."""

    values: dict[str, Any]
    # one line: "autotune config 1 of 5 (...): chosen by the kernel's @triton.autotune ...", "--config", ...
    source: str
    extra: dict[str, Any] = field(default_factory=dict)  # config kwargs that are not kernel parameters
    config_index: int | None = None  # the autotune config started from
    pre_hook: Any = field(default=None, compare=False)  # that config's pre_hook, run before every launch

    def label(self) -> str:
        shown = ",".join(f"{k}={v}" for k, v in self.values.items())
        return shown or "(none)"

    def describe(self) -> str:
        # an autotune config's source says how to choose another itself
        hint = "" if self.config_index is not None else "; choose others with --config NAME=VALUE,..."
        return f"constexprs/launch options: {self.label()} ({self.source}{hint})"


def parse_config_option(texts: list[str] | tuple[str, ...] | str | None) -> dict[str, Any]:
    """`--config BLOCK_SIZE_M=128,GROUP_SIZE_M=8` (repeatable) -> {"BLOCK_SIZE_M": 128, ...}."""
    if not texts:
        return {}
    items = [texts] if isinstance(texts, str) else list(texts)
    out: dict[str, Any] = {}
    for text in items:
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, raw = part.partition("=")
            if not sep or not name.strip().isidentifier() or not raw.strip():
                raise UserError(f"--config {part!r}: write NAME=VALUE, e.g. --config BLOCK_SIZE_M=128,num_warps=8")
            out[name.strip()] = _value(raw.strip())
    return out


def _value(raw: str) -> Any:
    """A number, True/False/None, a Python literal (e.g. a dict of launch options), else the text itself."""
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw.strip("'\"")


def choose(kernel: FoundKernel, overrides: dict[str, Any], autotune_index: int = 0, why: str = "") -> Choice:
    """The values to force: an autotune config (index `autotune_index`) overlaid with `overrides`; `why` follows
    the config in the source line: how that index was chosen (userkernel.autotune.index_for)."""
    known = set(kernel.params) | set(LAUNCH_OPTIONS)
    extra_known = {k for c in kernel.autotune_configs for k in c.kwargs}
    unknown = [k for k in overrides if k not in known and k not in extra_known]
    inside = _in_kernel_constants(kernel)
    fixed = [k for k in unknown if k in inside]
    if fixed:
        line = inside[fixed[0]]
        raise UserError(
            f"--config {', '.join(fixed)}: kernel {kernel.name} sets {fixed[0]} in its body (line {line}), not as a "
            "parameter: it runs with the kernel's own value (edit the file to change it)")
    if unknown:
        constexprs = ", ".join(kernel.constexprs) or "none"
        raise UserError(
            f"--config {', '.join(unknown)}: kernel {kernel.name} has no such parameter; its constexprs are "
            f"{constexprs} (plus {', '.join(LAUNCH_OPTIONS)})"
        )
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if kernel.autotune_configs:
        n = len(kernel.autotune_configs)
        if not 0 <= autotune_index < n:
            raise UserError(f"--autotune-config {autotune_index}: kernel {kernel.name} has {n} configs (0..{n - 1})")
        config = kernel.autotune_configs[autotune_index]
        for key, value in config.kwargs.items():
            (values if key in kernel.params else extra)[key] = value
        if config.num_warps is not None:
            values["num_warps"] = config.num_warps
        if config.num_stages is not None:
            values["num_stages"] = config.num_stages
        source = f"autotune config {autotune_index} of {n} ({config.label()}){why}"
        if overrides:
            source += ", overridden by --config"
    else:
        source = "--config" if overrides else "the launch's own arguments and the signature's defaults"
    values.update(overrides)
    if not kernel.autotune_configs:
        return Choice(values, source, extra)
    return Choice(values, source, extra, autotune_index, kernel.autotune_configs[autotune_index].pre_hook)


def apply(choice: Choice, kernel: FoundKernel, kwargs: dict[str, Any], interpreting: bool) -> dict[str, Any]:
    """A launch's keyword arguments with the choice forced in; launch options are dropped under the
    interpreter (it ignores them) and config-only keys (e.g. waves_per_eu) are passed on the GPU only, and
    only those this GPU's compiler knows: an AMD kernel's waves_per_eu is refused by Triton's CUDA backend,
    and its autotune configs are written for AMD's (the kernel itself runs on either)."""
    out = dict(kwargs)
    for key, value in choice.values.items():
        if key in LAUNCH_OPTIONS and interpreting:
            continue
        out[key] = value
    if not interpreting:
        dropped = dropped_options(choice)
        out.update({k: v for k, v in choice.extra.items() if k not in dropped})
    return out


@functools.cache
def backend_options(target: Any = None) -> frozenset[str]:
    """The compile options a Triton backend accepts (num_warps, ..., waves_per_eu on AMD's): the active
    GPU's, or `target`'s (a triton GPUTarget)."""
    import triton
    from triton.compiler.compiler import make_backend

    return frozenset(vars(make_backend(target or triton.runtime.driver.active.get_current_target()).parse_options({})))


def dropped_options(choice: Choice) -> list[str]:
    """The choice's config-only keys this GPU's compiler does not know (not passed; see apply)."""
    known = backend_options()
    return [k for k in choice.extra if k not in known]


def _in_kernel_constants(kernel: FoundKernel) -> dict[str, int]:
    """In-kernel constants (`NUM_XCDS: tl.constexpr = 8` in the body) -> their file line."""
    try:
        tree = ast.parse(kernel.source)
    except SyntaxError:
        return {}
    return {node.target.id: kernel.first_line + node.lineno - 1 for node in ast.walk(tree)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and "constexpr" in ast.unparse(node.annotation)}
