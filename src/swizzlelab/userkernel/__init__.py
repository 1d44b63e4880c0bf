"""Kernels as people write them: import a kernel file on any machine, unwrap autotune, choose its config,
launch it through the user's own wrapper, find its swizzle site and trace it to predict its L2 behaviour.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.runtime import device
from swizzlelab.swizzle import apply_swizzle
from swizzlelab.swizzle.emit import find_site
from swizzlelab.userkernel.config import Choice, choose, parse_config_option
from swizzlelab.userkernel.launch import Inputs, Launcher, build_arguments, parse_scalar, parse_tensor_spec, resolve_wrapper
from swizzlelab.userkernel.marked import MarkedKernel, mark
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
    marked: MarkedKernel
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
        how = f" ({self.site.how})" if self.site.how else ""
        lines.append(f"swizzle site: {self.site_lines()}{how}{loop}, yielding {', '.join(self.site.outputs)}")
        if self.marked.hoisted:
            lines.append(f"  (its lines defining {', '.join(self.marked.hoisted)} do not depend on the program id: "
                         "swizzlelab's copy computes them before the site, the file is untouched)")
        lines.append(self.choice.describe())
        lines.append(self.launcher.describe())
        return lines


def site_of(kernel: FoundKernel) -> SiteSpan:
    """The kernel's swizzle site (swizzle.emit's finder) as a SiteSpan."""
    found = find_site(kernel.source, kernel.name)
    # swizzle.site.Site names a persistent loop's variable `index_name` with kind "loop"
    kind = getattr(found, "kind", "")
    loop_var = getattr(found, "index_name", None) if kind == "loop" else None
    how = "between the swizzle markers" if kind == "markers" else "found automatically"
    return SiteSpan(found.start, found.stop, tuple(found.outputs), loop_var, how)


def site_from_lines(kernel: FoundKernel, spec: str) -> SiteSpan:
    """`--site A-B`: file lines A..B (inclusive) of the kernel as its swizzle site."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", spec)
    if not match:
        raise UserError(f"--site {spec!r}: write the file lines of the remap block as A-B, e.g. --site 58-66")
    first_line = kernel.jit_fn.fn.__code__.co_firstlineno
    lo, hi = int(match[1]), int(match[2] or match[1])
    n_lines = len(kernel.source.splitlines())
    if not first_line < lo <= hi < first_line + n_lines:
        raise UserError(f"--site {spec}: kernel {kernel.name} spans file lines {first_line}-{first_line + n_lines - 1}")
    start, stop = lo - first_line, hi - first_line + 1
    block = "\n".join(kernel.source.splitlines()[start:stop])
    try:
        tree = ast.parse(textwrap.dedent(block))
    except SyntaxError:
        raise UserError(f"--site {spec}: file lines {lo}-{hi} are not whole statements on their own") from None
    assigned = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    if {"pid_m", "pid_n"} <= set(assigned):
        outputs: tuple[str, ...] = ("pid_m", "pid_n")
    else:
        # the names the block assigns that the kernel reads after it: what it hands on as tile coordinates
        after = "\n".join(kernel.source.splitlines()[stop:])
        used = [n for n in dict.fromkeys(assigned) if re.search(rf"\b{re.escape(n)}\b", after)]
        outputs = ("pid",) if "pid" in used and len(used) != 2 else tuple(used)
        if len(outputs) not in (1, 2):
            raise UserError(
                f"--site {spec}: the kernel reads {len(outputs)} names the block assigns ({', '.join(outputs) or 'none'}); "
                "take the lines that compute the tile's one or two coordinates"
            )
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    loop_var = None
    for node in ast.walk(ast.parse(kernel.source)):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id in reads \
                and node.lineno <= start and (node.end_lineno or 0) >= stop:
            loop_var = node.target.id
    return SiteSpan(start, stop, outputs, loop_var, "given with --site")


def pick_kernel(kfile: KernelFile, name: str | None, site: str | None = None) -> tuple[FoundKernel, SiteSpan]:
    """The kernel named `name`, else the file's one kernel with a swizzle site; `site` (--site A-B) overrides."""
    if site:
        candidates = [kfile.kernels[name]] if name and name in kfile.kernels else list(kfile.kernels.values())
        for kernel in candidates:
            first = kernel.jit_fn.fn.__code__.co_firstlineno
            lo = int(site.split("-")[0]) if site.split("-")[0].strip().isdigit() else -1
            if first < lo < first + len(kernel.source.splitlines()):
                return kernel, site_from_lines(kernel, site)
        raise UserError(f"--site {site}: those lines lie in no kernel of {kfile.path.name}")
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
        raise KernelSiteError(f"{kfile.path.name}: no @triton.jit function with a swizzle site: give its lines with --site A-B ({'; '.join(reasons)[:400]})")
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
    site: str | None = None,
) -> UserKernel:
    """`spec` is FILE or FILE:KERNEL. Imports the file, picks the kernel, its site, config and launcher."""
    path, sep, kernel_name = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, kernel_name = spec, ""
    kfile = load_kernel_file(path, model)
    kernel, found = pick_kernel(kfile, kernel_name or None, site)
    marked = mark(kernel.source, found, kernel.jit_fn.fn.__globals__)
    choice = choose(kernel, dict(config or {}), autotune_index)
    wrapper = resolve_wrapper(kfile, launch, kernel)
    arguments = build_arguments(wrapper, inputs or Inputs(), device())
    launcher = Launcher(kfile, kernel, wrapper, arguments, choice, model,
                        splice=lambda _jit_fn, formula: apply_swizzle(marked.jit_fn, marked.kernel_formula(formula)),
                        seed=(inputs or Inputs()).seed)
    return UserKernel(kfile, kernel, found, choice, launcher, marked)


__all__ = [
    "Choice", "FoundKernel", "Inputs", "KernelFile", "Launcher", "OwnOrder", "ShimInfo", "SiteSpan", "TuneConfig",
    "UserKernel", "UserTrace", "choose", "device_shim", "load_kernel_file", "open_user_kernel", "parse_config_option",
    "build_arguments", "parse_scalar", "parse_tensor_spec", "pick_kernel", "resolve_wrapper", "site_of", "trace_user_kernel",
]
