"""Kernels as people write them: import a kernel file on any machine, unwrap autotune, choose its config,
launch it through the user's own wrapper, find its swizzle site and trace it to predict its L2 behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.userkernel.config import Choice, choose, parse_config_option
from swizzlelab.userkernel.launch import Inputs, Launcher, build_arguments, parse_scalar, parse_tensor_spec, resolve_wrapper
from swizzlelab.userkernel.load import FoundKernel, KernelFile, TuneConfig, load_kernel_file
from swizzlelab.userkernel.shim import ShimInfo, device_shim
from swizzlelab.userkernel.tiles import OwnOrder, SiteSpan
from swizzlelab.userkernel.trace import UserTrace, trace_user_kernel


@dataclass
class UserKernel:
    """One kernel of a user's file, ready to trace, splice and launch."""

    kfile: KernelFile
    kernel: FoundKernel
    site: SiteSpan
    choice: Choice
    launcher: Launcher
    _trace: UserTrace | None = None

    @property
    def name(self) -> str:
        return self.kernel.name

    def site_lines(self) -> str:
        """'lines A-B' of the file that were taken as the swizzle site."""
        first = self.kernel.jit_fn.fn.__code__.co_firstlineno
        # co_firstlineno is the first decorator's line; the dedented source starts there as well
        return self.site.lines_label(first)

    def site_text(self) -> str:
        lines = self.kernel.source.splitlines()[self.site.start:self.site.stop]
        return "\n".join(lines)

    def trace(self) -> UserTrace:
        if self._trace is None:
            self._trace = trace_user_kernel(self.launcher, self.site)
        return self._trace

    def describe(self) -> list[str]:
        """What was chosen, one line each, for the user to read before any figure."""
        lines = []
        if self.kfile.shim is not None:
            lines.append(self.kfile.shim.describe())
        wrapped = f" (unwrapped from {' > '.join(self.kernel.wrappers)})" if self.kernel.wrappers else ""
        lines.append(f"kernel {self.kernel.name}{wrapped} in {self.kfile.path}")
        loop = f", inside the loop over {self.site.loop_var}" if self.site.loop_var else ""
        lines.append(f"swizzle site: {self.site_lines()}{loop}, yielding {', '.join(self.site.outputs)}")
        lines.append(self.choice.describe())
        lines.append(self.launcher.describe())
        return lines


def site_of(kernel: FoundKernel) -> SiteSpan:
    """The kernel's swizzle site (swizzle.emit's finder) as a SiteSpan."""
    from swizzlelab.swizzle.emit import find_site

    found = find_site(kernel.source, kernel.name)
    loop_var = getattr(found, "loop_var", None)
    return SiteSpan(found.start, found.stop, tuple(found.outputs), loop_var)


def pick_kernel(kfile: KernelFile, name: str | None) -> tuple[FoundKernel, SiteSpan]:
    """The kernel named `name`, else the file's one kernel with a swizzle site."""
    if name:
        kernel = kfile.kernels.get(name)
        if kernel is None:
            raise UserError(f"{kfile.path.name}: no @triton.jit kernel {name!r} (kernels: {', '.join(kfile.kernels)})")
        return kernel, site_of(kernel)
    with_site: list[tuple[FoundKernel, SiteSpan]] = []
    reasons: list[str] = []
    for kernel in kfile.kernels.values():
        try:
            with_site.append((kernel, site_of(kernel)))
        except KernelSiteError as err:
            reasons.append(str(err))
    if len(with_site) == 1:
        return with_site[0]
    if not with_site:
        raise KernelSiteError(f"{kfile.path.name}: no kernel has a swizzle site ({'; '.join(reasons)[:400]})")
    raise KernelSiteError(
        f"{kfile.path.name}: kernels {', '.join(k.name for k, _ in with_site)} all have a swizzle site: name one "
        f"with --kernel {kfile.path.name}:KERNEL"
    )


def open_user_kernel(
    spec: str,
    model: HardwareModel,
    *,
    config: dict[str, Any] | None = None,
    autotune_index: int = 0,
    launch: str | None = None,
    inputs: Inputs | None = None,
) -> UserKernel:
    """`spec` is FILE or FILE:KERNEL. Imports the file, picks the kernel, its site, config and launcher."""
    from swizzlelab.runtime import device
    from swizzlelab.swizzle import apply_swizzle

    path, sep, kernel_name = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, kernel_name = spec, ""
    kfile = load_kernel_file(path, model)
    kernel, site = pick_kernel(kfile, kernel_name or None)
    choice = choose(kernel, dict(config or {}), autotune_index)
    wrapper = resolve_wrapper(kfile, launch, kernel)
    arguments = build_arguments(wrapper, inputs or Inputs(), device())
    launcher = Launcher(kfile, kernel, wrapper, arguments, choice, model, splice=apply_swizzle)
    return UserKernel(kfile, kernel, site, choice, launcher)


__all__ = [
    "Choice", "FoundKernel", "Inputs", "KernelFile", "Launcher", "OwnOrder", "ShimInfo", "SiteSpan", "TuneConfig",
    "UserKernel", "UserTrace", "choose", "device_shim", "load_kernel_file", "open_user_kernel", "parse_config_option",
    "parse_scalar", "parse_tensor_spec", "pick_kernel", "site_of", "trace_user_kernel",
]
