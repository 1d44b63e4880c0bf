"""Kernels as people write them: import a kernel file on any machine, unwrap autotune, choose its config (the
one its own @triton.autotune picks, on a GPU), launch it through the user's own wrapper, find its swizzle site, trace it (always under the interpreter) to
predict its L2 behaviour, and write the file back with an order at its site.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field, replace
from typing import Any

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.runtime import device
from swizzlelab.swizzle.emit import find_site
from swizzlelab.userkernel.autotune import fitting, index_for
from swizzlelab.userkernel.child import Request, request_for, run_in_child
from swizzlelab.userkernel.config import LAUNCH_OPTIONS, Choice, choose, dropped_options, parse_config_option
from swizzlelab.userkernel.inductor import seeded_inputs
from swizzlelab.userkernel.inline import Inlined, fold_constexpr_ifs, inline_helpers, plain_program_ids
from swizzlelab.userkernel.launch import (Inputs, Launcher, Wrapper, build_arguments, parse_scalar, parse_tensor_spec,
                                          resolve_wrapper, running)
from swizzlelab.userkernel.model_check import TaskModel, task_model_of
from swizzlelab.userkernel.marked import MarkedKernel, Twin, mark, target_names
from swizzlelab.userkernel.load import FoundKernel, KernelFile, TuneConfig, load_kernel_file, split_kernel_spec
from swizzlelab.userkernel.shim import ShimInfo, device_shim
from swizzlelab.userkernel.sites import OtherSite, inline_twins, others, promoted
from swizzlelab.userkernel.terms import GridTerms, grid_terms
from swizzlelab.userkernel.tiles import OwnOrder, SiteSpan
from swizzlelab.userkernel.user_trace import UserTrace, trace_user_kernel


@dataclass
class UserKernel:
    """One kernel of a user's file, ready to trace, splice and launch."""

    kfile: KernelFile
    kernel: FoundKernel
    site: SiteSpan
    choice: Choice
    launcher: Launcher
    marked: MarkedKernel
    analysed: str = ""  # the kernel's source as the site was read in (ifs folded, the site's helper inlined)
    request: Request | None = None  # what rebuilds it in a child process (the other Triton mode)
    # A trace that cannot be derived interprets every program: refused when that would take longer (None: no limit).
    max_interpret_s: float | None = None
    # The task's access model, for a trace that cannot be derived (checked on a sample of programs first).
    task_model: TaskModel | None = None
    # The kernel's own names for the tile counts family orders read (grid_m, ...), found from its source.
    terms: GridTerms = field(default_factory=GridTerms)
    chosen: str = ""  # why this kernel of several (torch.compile's output: the one with the most programs)
    other_sites: tuple[OtherSite, ...] = ()  # remaps of the kernel neither its site nor a twin of it
    _trace: UserTrace | None = None

    @property
    def name(self) -> str:
        return self.kernel.name

    def site_lines(self) -> str:
        """'lines A-B' of the file that were taken as the swizzle site."""
        # first_line is the first decorator's line; the dedented source starts there as well
        return self.site.lines_label(self.kernel.first_line)

    def site_text(self) -> str:
        lines = self.kernel.source.splitlines()[self.site.start:self.site.stop]
        return "\n".join(lines)

    @property
    def trace_method(self) -> str:
        """One line: how the trace was obtained (derived or fully interpreted, once traced) and where."""
        where = ("in this process under the Triton interpreter" if self.kernel.interpreted else
                 "in a child process under the Triton interpreter (kernels here run compiled on the GPU)")
        how = self._trace.how if self._trace is not None else None
        return f"{how.describe()}; {where}" if how is not None else f"traced {where}"

    def trace(self) -> UserTrace:
        """The kernel's trace, always recorded under the interpreter: here when this process interprets its
        kernels, else by a child process importing the file interpreted (the compiled copy is what is measured)."""
        if self._trace is None:
            try:
                self._trace = self._traced()
            except UserError as err:
                inline = [t for t in self.marked.twins if t.inline]
                if not inline or "without covering each tile once" not in str(err):
                    raise
                # stream-K: the tiles the site's phase leaves are split between programs by the twin's phase
                said = str(err).split("without covering each tile once")[0]
                raise UserError(
                    f"{said}without covering each tile once: the same remap's other phase (over {inline[0].index}) takes "
                    "the tiles left, split between programs, which swizzlelab does not trace: run it at a size where the "
                    "site's phase covers every tile (stream-K: a tile count that is a multiple of the SM count, or at "
                    "most it)") from None
        return self._trace

    def _traced(self) -> UserTrace:
        if self.kernel.interpreted:
            return trace_user_kernel(self.launcher, self.site, source=self.analysed or None,
                                     max_interpret_s=self.max_interpret_s, task_model=self.task_model)
        if self.request is None:
            raise UserError(f"{self.name}: compiled here and opened without a request a child can rebuild")
        return run_in_child(self.request, "trace", interpret=True)

    def file_source(self, formula: Any) -> str:
        """The user's file with `formula` at the kernel's site (and at each twin of it), every other line as
        written; UserError when the result would not parse."""
        module_lines = self.kfile.module_source.splitlines()
        first = self.kernel.first_line - 1
        raw = module_lines[first:first + len(self.kernel.source.splitlines())]
        indent = raw[0][: len(raw[0]) - len(raw[0].lstrip())] if raw else ""
        own = [line[len(indent):] if line.startswith(indent) else line for line in raw]
        def_index = next(i for i, line in enumerate(own) if line.lstrip().startswith("def "))
        function = own[def_index:]
        new = own[:def_index] + self.marked.function_lines(function, formula, _still_read(function, self.marked))
        text_lines = module_lines[:first] + [indent + line if line.strip() else line for line in new] \
            + module_lines[first + len(raw):]
        text = "\n".join(text_lines) + "\n"
        try:
            ast.parse(text)
        except SyntaxError as err:
            raise UserError(f"{self.kfile.path.name}: the order does not splice into {self.site_lines()} of the file "
                            f"as written ({err.msg} at line {err.lineno}); the site cuts through a block") from None
        return text

    def describe(self) -> list[str]:
        """What was chosen, one line each, for the user to read before any figure."""
        lines = []
        if self.kfile.shim is not None:
            lines.append(self.kfile.shim.describe())
        lines += [f"import: {note}" for note in self.kfile.notes]
        wrapped = f" (unwrapped from {' > '.join(self.kernel.wrappers)})" if self.kernel.wrappers else ""
        if self.kfile.inductor is not None:
            wrapped += " (torch.compile's output: the kernel's source string, at its lines of the file)"
        lines.append(f"kernel {self.kernel.name}{wrapped} in {self.kfile.path}")
        if self.chosen:
            lines.append(f"  {self.chosen}")
        loop = f", inside the loop over {self.site.loop_var}" if self.site.loop_var else ""
        how = f" ({self.site.how})" if self.site.how else ""
        lines.append(f"swizzle site: {self.site_lines()}{how}{loop}, yielding {', '.join(self.site.outputs)}")
        first = self.kernel.first_line
        for twin in self.marked.twins:
            at = first + self.site.start - self.marked.span[0] + twin.start
            span = f"line {at}" if twin.stop - twin.start <= 1 else f"lines {at}-{at + twin.stop - twin.start - 1}"
            lines.append(f"  the same remap runs again at {span} (over {twin.index}, yielding {', '.join(twin.targets)}): "
                         "one order is spliced at both, optimized together")
        for other in self.other_sites:
            span = SiteSpan(other.start, other.stop, other.outputs).lines_label(first)
            lines.append(f"  another remap at {span} (yielding {', '.join(other.outputs)}) is not this run's: optimize it "
                         f"with --site {span.split()[-1]}")
        if self.marked.hoisted:
            lines.append(f"  (its lines defining {', '.join(self.marked.hoisted)} do not depend on the program id: "
                         "swizzlelab's copy computes them before the site, the file is untouched)")
        if terms := self.terms.describe():
            lines.append(f"  {terms}")
        lines.append(self.choice.describe())
        if not self.kfile.interpreted and device() == "cuda" and (dropped := dropped_options(self.choice)):
            lines.append(f"  not passed: {', '.join(dropped)} (options of another GPU's Triton compiler; this one "
                         "refuses them)")
        lines.append(self.launcher.describe())
        return lines


def _still_read(function: list[str], marked: MarkedKernel) -> list[str]:
    """Lines of the file's own site that assign names its kernel still reads after the site (e.g. split-K's
    `pid_z = tl.program_id(1)`, which the site read but a constexpr `if` left unused in this run), from values
    known before the site: kept ahead of the order in the file a user takes home."""
    start, stop = marked.span
    try:
        func = next(n for n in ast.parse("\n".join(function)).body if isinstance(n, ast.FunctionDef))
    except (SyntaxError, StopIteration):
        return []
    inside = [n for n in func.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and start < n.lineno <= stop]
    assigned_inside = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and start < n.lineno <= stop
                       for t in n.targets if isinstance(t, ast.Name)}
    read_after = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                  and n.lineno > stop}
    provided = {t for line in marked.head + marked.after for t in re.findall(r"^\s*(\w+)\s*=", line)} | {"pid_m", "pid_n", "pid"}
    kept = []
    for node in inside:
        names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]
        reads = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if node.value is not None else set()
        if any(n in read_after and n not in provided for n in names) and not (reads & assigned_inside):
            kept.append(marked.indent + ast.unparse(node))
    return kept


@dataclass(frozen=True)
class Analysed:
    """A kernel's source as the site finder reads it: constexpr `if`s folded with the values known for this run,
    index helpers inlined; line for line the file's."""

    source: str
    inlined: Inlined
    folded: str  # with the `if`s folded only (helper calls as written)


def analyse(kernel: FoundKernel, values: dict[str, Any]) -> Analysed:
    folded = plain_program_ids(fold_constexpr_ifs(kernel.source, values))
    inlined = inline_helpers(folded, kernel.jit_fn.fn.__globals__, kernel.jit_fn.fn.__module__)
    return Analysed(inlined.source, inlined, folded)


def known_values(kernel: FoundKernel, config: dict[str, Any] | None, autotune_index: int | None) -> dict[str, Any]:
    """Constexpr values known before any launch: the signature's defaults, the autotune config, --config."""
    values = {k: v for k, v in kernel.defaults.items() if k in kernel.constexprs}
    index = autotune_index or 0  # None: not chosen yet; the first config's values fold the `if`s until then
    if kernel.autotune_configs and 0 <= index < len(kernel.autotune_configs):
        values.update(kernel.autotune_configs[index].kwargs)
    values.update({k: v for k, v in (config or {}).items() if k not in LAUNCH_OPTIONS})
    return values


def site_of(kernel: FoundKernel, analysed: Analysed | None = None) -> SiteSpan:
    """The kernel's swizzle site (swizzle.emit's finder, on the analysed source) as a SiteSpan."""
    source = analysed.source if analysed is not None else kernel.source
    found = find_site(source, kernel.name, line_offset=kernel.first_line - 1)
    # swizzle.site.Site names a persistent loop's variable `index_name` with kind "loop"
    kind = getattr(found, "kind", "")
    # a marked block reads the persistent loop's variable through the lines above it (best_kernel.py says
    # `swz_launch = tile_id` just above its markers)
    loop_var = (getattr(found, "index_name", None) if kind == "loop" else
                _block_loop_var(source, found.start, found.stop) if kind == "markers" else None)
    how = "between the swizzle markers" if kind == "markers" else "found automatically"
    span, index = promoted(source, SiteSpan(found.start, found.stop, tuple(found.outputs), loop_var, how), kernel.name)
    return replace(span, index=index)


def _block_loop_var(source: str, start: int, stop: int) -> str | None:
    """The variable of the innermost `for` loop around lines [start, stop) of `source` that the block reads,
    directly or through the plain assignments before it in the loop; None when it reads none."""
    lines = source.splitlines()
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines)))
        block = ast.parse(textwrap.dedent("\n".join(lines[start:stop])))
    except SyntaxError:
        return None
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
             and n.lineno <= start and (n.end_lineno or 0) >= stop]
    if not loops:
        return None
    reads = {n.id for n in ast.walk(block) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    loop = max(loops, key=lambda n: n.lineno)  # the innermost loop holding the block
    before = [n for n in ast.walk(loop) if isinstance(n, ast.Assign) and n.lineno <= start
              and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]
    for node in sorted(before, key=lambda n: -n.lineno):
        if node.targets[0].id in reads:
            reads |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return loop.target.id if loop.target.id in reads else None


def site_from_lines(kernel: FoundKernel, spec: str, analysed: Analysed | None = None) -> SiteSpan:
    """`--site A-B`: file lines A..B (inclusive) of the kernel as its swizzle site."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", spec)
    if not match:
        raise UserError(f"--site {spec!r}: write the file lines of the remap block as A-B, e.g. --site 58-66")
    source = analysed.source if analysed is not None else kernel.source
    first_line = kernel.first_line
    lo, hi = int(match[1]), int(match[2] or match[1])
    n_lines = len(source.splitlines())
    if not first_line < lo <= hi < first_line + n_lines:
        raise UserError(f"--site {spec}: kernel {kernel.name} spans file lines {first_line}-{first_line + n_lines - 1}")
    start, stop = lo - first_line, hi - first_line + 1
    block = "\n".join(source.splitlines()[start:stop])
    try:
        tree = ast.parse(textwrap.dedent(block))
    except SyntaxError:
        raise UserError(f"--site {spec}: file lines {lo}-{hi} are not whole statements on their own") from None
    assigned = [name for stmt in tree.body for name in target_names(stmt)]
    if {"pid_m", "pid_n"} <= set(assigned):
        outputs: tuple[str, ...] = ("pid_m", "pid_n")
    else:
        # the names the block assigns that the kernel reads after it: what it hands on as tile coordinates
        after = "\n".join(source.splitlines()[stop:])
        used = [n for n in dict.fromkeys(assigned) if re.search(rf"\b{re.escape(n)}\b", after)]
        outputs = ("pid",) if "pid" in used and len(used) != 2 else tuple(used)
        if len(outputs) not in (1, 2):
            raise UserError(
                f"--site {spec}: the kernel reads {len(outputs)} names the block assigns ({', '.join(outputs) or 'none'}); "
                "take the lines that compute the tile's one or two coordinates"
            )
    return SiteSpan(start, stop, outputs, _block_loop_var(source, start, stop), "given with --site")


def pick_kernel(kfile: KernelFile, name: str | None, site: str | None = None,
                values: Any = None) -> tuple[FoundKernel, SiteSpan, Analysed]:
    """The kernel named `name`, else the file's one kernel with a swizzle site; `site` (--site A-B) overrides.
    `values(kernel)` gives the constexpr values known for it (to fold `if`s on them)."""
    def analysed_of(kernel: FoundKernel) -> Analysed:
        return analyse(kernel, values(kernel) if values else {})

    if site:
        candidates = [kfile.kernels[name]] if name and name in kfile.kernels else list(kfile.kernels.values())
        for kernel in candidates:
            first = kernel.first_line
            lo = int(site.split("-")[0]) if site.split("-")[0].strip().isdigit() else -1
            if first < lo < first + len(kernel.source.splitlines()):
                analysed = analysed_of(kernel)
                return kernel, site_from_lines(kernel, site, analysed), analysed
        raise UserError(f"--site {site}: those lines lie in no kernel of {kfile.path.name}")
    if name:
        kernel = kfile.kernels.get(name)
        if kernel is None:
            raise UserError(f"{kfile.path.name}: no @triton.jit kernel {name!r} (kernels: {', '.join(kfile.kernels)})")
        analysed = analysed_of(kernel)
        return kernel, site_of(kernel, analysed), analysed
    with_site: list[tuple[FoundKernel, SiteSpan, Analysed]] = []
    reasons: list[str] = []
    for kernel in kfile.kernels.values():
        try:
            analysed = analysed_of(kernel)
            with_site.append((kernel, site_of(kernel, analysed), analysed))
        except KernelSiteError as err:
            reasons.append(str(err))
    if len(with_site) == 1:
        return with_site[0]
    if not with_site:
        raise KernelSiteError(f"{kfile.path.name}: no @triton.jit function with a swizzle site: give its lines with --site A-B ({'; '.join(reasons)[:400]})")
    raise KernelSiteError(
        f"{kfile.path.name}: kernels {', '.join(k.name for k, _, _ in with_site)} all have a swizzle site: name one "
        f"with --kernel {kfile.path.name}:KERNEL"
    )


def _marking(analysed: Analysed, site: SiteSpan, kernel_name: str) -> tuple[str, tuple[Twin, ...], tuple[OtherSite, ...]]:
    """The source the marked copies are made from (helper calls as written, but the site's own, inlined), the
    site's twins (later calls of the helper the site inlines, and the same remap written again inline), and the
    kernel's other remaps."""
    folded = analysed.folded.splitlines()
    inlined = analysed.source.splitlines()
    lines = folded[:site.start] + inlined[site.start:site.stop] + folded[site.stop:]
    calls = analysed.inlined.calls
    own = [c for c in calls if site.start <= c.start < site.stop]
    twins: list[Twin] = []
    if own:
        helper = own[0]
        # the argument carrying the launch index: the one reading the loop variable (or the first)
        position = next((i for i, a in enumerate(helper.args) if site.loop_var and re.search(rf"\b{site.loop_var}\b", a)), 0)
        for call in calls:
            if call.helper == helper.helper and call.start >= site.stop:
                twins.append(Twin(call.start, call.stop, call.args[position], call.targets, call.indent))
    text = "\n".join(lines) + "\n"
    twins += inline_twins(text, site, site.loop_var or site.index, tuple(twins))
    twins.sort(key=lambda t: t.start)
    return text, tuple(twins), others(text, site, tuple(twins), kernel_name)


def open_user_kernel(
    spec: str,
    model: HardwareModel,
    *,
    config: dict[str, Any] | None = None,
    autotune_index: int | None = None,
    launch: str | None = None,
    inputs: Inputs | None = None,
    site: str | None = None,
    interpret: bool | None = None,
    kfile: KernelFile | None = None,
    own_autotune: bool = False,
) -> UserKernel:
    """`spec` is FILE or FILE:KERNEL. Imports the file, picks the kernel, its site, config and launcher.
    `interpret`: import the file's kernels interpreted/compiled (default: as kernels run on this machine); `kfile`:
    the file already imported (load_kernel_file) for `model` in that mode. `autotune_index` None: with
    `own_autotune` (commands that time the kernel), on a GPU, the config the kernel's own @triton.autotune picks
    at these inputs (autotune.index_for: its wrapper runs once more for that); else the first."""
    # ten parameters: what a --kernel command was given, passed through as one call (and rebuilt in a child)
    path, kernel_name = split_kernel_spec(spec)
    if kfile is None:
        kfile = load_kernel_file(path, model, interpret=interpret)
    chosen = ""  # why this kernel, where the file has several and none was named
    if kernel_name or len(kfile.kernels) == 1:
        kernel = kfile.kernels.get(kernel_name) if kernel_name else next(iter(kfile.kernels.values()))
        if kernel is None:
            raise UserError(f"{kfile.path.name}: no @triton.jit kernel {kernel_name!r} (kernels: {', '.join(kfile.kernels)})")
    elif kfile.inductor is not None and not site:
        kernel, chosen = _inductor_default(kfile, lambda k: known_values(k, config, autotune_index))
    else:
        kernel = pick_kernel(kfile, None, site, lambda k: known_values(k, config, autotune_index))[0]
    choose(kernel, dict(config or {}), autotune_index or 0)  # a wrong --config/--autotune-config is said first
    try:
        wrapper = resolve_wrapper(kfile, launch, kernel)
    except UserError:
        # a kernel without any site is the more basic problem: say that one (the site is read again below,
        # with the constexprs the launch passes)
        pick_kernel(kfile, kernel_name or None, site, lambda k: known_values(k, config, autotune_index))
        raise
    given = inputs or Inputs()
    where = "cpu" if kfile.interpreted else device()
    compiled_launch = kfile.inductor.launches.get(kernel.name) if kfile.inductor is not None else None
    with kfile.folder_on_path():
        # an interpreted copy's inputs live on the CPU, also beside a GPU (see device_shim)
        arguments = build_arguments(wrapper, given, where, kfile.path.parent,
                                    seeded_inputs(compiled_launch, given.seed, where) if compiled_launch else None)

    def run_own() -> None:
        with running(kfile, model):
            wrapper(**arguments)

    tuned = index_for(kernel, autotune_index, bool(config), own_autotune, run_own, f"{wrapper.__name__}(...)")
    holder: list[MarkedKernel] = []
    launcher = Launcher(kfile, kernel, wrapper, arguments, choose(kernel, dict(config or {}), tuned.index, tuned.why),
                        model, splice=lambda _jit_fn, formula: holder[0].spliced(formula), seed=given.seed,
                        launch_spec=launch)
    if not kfile.interpreted and device() == "cuda":
        # a config that does not fit this GPU's shared memory would end the first launch in OutOfResources
        tuned = fitting(kernel, tuned, bool(config), autotune_index, lambda index: _shared_bytes(launcher, config, index))
    autotune_index = tuned.index
    choice = choose(kernel, dict(config or {}), autotune_index, tuned.why)
    launcher = replace(launcher, choice=choice)
    # the constexprs as the wrapper launches them (it may pass NUM_XCDS=8 itself): `if`s on them fold
    launched = {k: v for k, v in launcher.probe().items() if k in kernel.constexprs}
    values = {**known_values(kernel, config, autotune_index), **launched}
    kernel, found, analysed = pick_kernel(kfile, kernel.name, site, lambda k: values)
    marking_source, twins, other_sites = _marking(analysed, found, kernel.name)
    marked = mark(marking_source, found, kernel.jit_fn.fn.__globals__, twins)
    holder.append(marked)
    # the kernel by name: a child rebuilding it must open this one, also where it was chosen here (the one with
    # the most programs of a torch.compile output)
    request = request_for(f"{kfile.path}:{kernel.name}", model, config, autotune_index, launch, site, given)
    own_names = {new: old for old, new in marked.renamed.items()}
    terms = grid_terms(marked.source, marked.site.start, marked.site.stop, marked.site.outputs,
                       (own_names.get("pid_m", "pid_m"), own_names.get("pid_n", "pid_n")), set(kernel.params))
    return UserKernel(kfile, kernel, found, choice, launcher, marked, marking_source, request,
                      task_model=task_model_of(given.task, given.sizes, given.seed, arguments), terms=terms,
                      chosen=chosen, other_sites=other_sites)


def _shared_bytes(launcher: Launcher, config: dict[str, Any] | None, index: int) -> tuple[int, int]:
    """(shared memory the kernel compiled at autotune config `index` needs, what this GPU has), in bytes."""
    import torch
    import triton

    trial = replace(launcher, choice=choose(launcher.kernel, dict(config or {}), index))
    compiled = trial.warmup()
    limit = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())["max_shared_mem"]
    return int(compiled.metadata.shared), int(limit)


def _inductor_default(kfile: KernelFile, values: Any) -> tuple[FoundKernel, str]:
    """torch.compile's output with no kernel named: the one with a swizzle site launching the most programs."""
    with_site = []
    for kernel in kfile.kernels.values():
        try:
            site_of(kernel, analyse(kernel, values(kernel)))
        except KernelSiteError:
            continue
        with_site.append(kernel.name)
    name, why = kfile.inductor.default_kernel(with_site)  # type: ignore[union-attr]
    return kfile.kernels[name], why


__all__ = [
    "Choice", "FoundKernel", "Inputs", "KernelFile", "Launcher", "OwnOrder", "ShimInfo", "SiteSpan", "TuneConfig",
    "UserKernel", "UserTrace", "Wrapper", "choose", "device_shim", "load_kernel_file", "open_user_kernel",
    "parse_config_option", "split_kernel_spec",
    "build_arguments", "parse_scalar", "parse_tensor_spec", "pick_kernel", "resolve_wrapper", "site_of", "trace_user_kernel",
]
