"""swizzlelab's own marked copies of a user kernel (the user's file stays as it is).

Both copies carry `# swizzle: begin/end` around the site, written over a launch index `pid` with outputs
`pid_m, pid_n` (or `pid`), so the swizzle language, its prover and its splicer work on them unchanged:
* the *evaluation* copy reads `pid = tl.program_id(0)`: what formulas are evaluated and proven against;
* the *kernel* copy reads `pid = swz_launch`, where a preamble before the site says what the launch index is
  in this kernel: the program id (1-D launch), `program_id(0) + num_programs(0) * program_id(1)` (a 2-D launch,
  axis 0 fastest as dispatched), or the persistent loop's variable (`for tile_id in range(...)`).
Lines of the site that do not depend on the launch index (e.g. `num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)`) are
hoisted before it; builtin min/max on integers become tl.minimum/tl.maximum.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import KernelSiteError
from swizzlelab.swizzle.lang import rename
from swizzlelab.userkernel.tiles import SiteSpan

LAUNCH = "swz_launch"  # the launch index in the kernel copy
N_AXIS0 = "swz_n0"  # programs along axis 0 of a 2-D launch


@dataclass(frozen=True)
class Twin:
    """Another place the site's remap runs (a second call of the helper the site inlines, e.g. tutorial 09's
    epilogue `pid_m, pid_n = _compute_pid(tile_id_c, ...)`): lines [start, stop) of the source, the launch
    index it passes and the names it assigns. An order must be spliced there as well."""

    start: int
    stop: int
    index: str
    targets: tuple[str, ...]
    indent: str
    inline: bool = False  # the remap written out again (not a call of the helper the site inlines)


@dataclass(frozen=True)
class MarkedKernel:
    """The evaluation copy (its site), the kernel copy's jit function, what was rewritten, and the pieces the
    kernel copy is made of, so an order can be spliced into it or into the user's own function."""

    source: str  # evaluation copy, decorators dropped
    site: SiteSpan  # the site in `source` (and in kernel_source: same lines)
    kernel_source: str  # kernel copy
    jit_fn: Any  # built from kernel_source
    hoisted: tuple[str, ...]  # names computed before the site
    launch_rank: int  # 1, or 2 for a 2-D launch grid
    renamed: dict[str, str]  # the kernel's own output names -> pid_m/pid_n
    head: tuple[str, ...] = ()  # hoisted lines and the preamble, before the site's block
    after: tuple[str, ...] = ()  # the renames back to the kernel's own names, after it
    twins: tuple[Twin, ...] = ()
    span: tuple[int, int] = (0, 0)  # the site's lines [start, stop) in the analysed source
    indent: str = "    "
    fn_globals: dict[str, Any] = field(default_factory=dict, repr=False)
    # the copies' `pid = swz_launch` is swizzlelab's (a loop or 2-D site has no launch index line of its own): never
    # kept in front of an order for a kernel's `pid` read after the site
    synthetic_launch: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def kernel_formula(self, formula: Any) -> Any:
        """`formula` (over tl.program_id(0)) rewritten for the kernel copy (over swz_launch)."""
        from swizzlelab.swizzle import parse_formula

        tree = ast.parse(formula.normalized_source())
        tree = _LaunchIndex().visit(tree)
        spliced = parse_formula(ast.unparse(ast.fix_missing_locations(tree)) + "\n", formula.outputs)
        if "pid" not in spliced.outputs and "pid" in spliced.assigned_names:
            # the order's launch index is its own: a kernel's `pid` read after the site (stream-K's second phase,
            # after the persistent loop its site sits in) keeps the program id
            spliced = rename(spliced, {"pid": "swz_pid"})
        return spliced

    def body_lines(self, formula: Any) -> list[str]:
        """The formula as the kernel copy's site block runs it (at the site's indentation), checked by the
        swizzle splicer against the names the kernel defines and reads. The splicer keeps ahead of it the block's
        lines it cannot tell apart from launch-free ones (the block reads `swz_launch`, not the program id):
        the kernel's own remap, dropped here unless the kernel reads what they assign and the formula does not."""
        from swizzlelab.swizzle.emit import _names_read_after, find_site, splice_source

        name = re.match(r"^def\s+(\w+)", self.kernel_source).group(1)  # type: ignore[union-attr]
        kernel_formula = self.kernel_formula(formula)
        spliced = splice_source(self.kernel_source, kernel_formula, name, name).splitlines()
        begin = next(i for i, line in enumerate(spliced) if line.strip() == "# swizzle: begin")
        end = next(i for i, line in enumerate(spliced) if line.strip() == "# swizzle: end")
        body = spliced[begin + 1:end]
        site = find_site(self.kernel_source, name)
        read_after = _names_read_after(self.kernel_source, site)
        needed = []
        for line in site.kept:
            target = line.split("=", 1)[0].strip()
            synthetic = self.synthetic_launch and line.replace(" ", "") == f"pid={LAUNCH}"
            needed.append(target in read_after and target not in kernel_formula.assigned_names and not synthetic)
        kept = len(site.kept) if body[:len(site.kept)] == [self.indent + k for k in site.kept] else 0
        return [line for i, line in enumerate(body) if i >= kept or needed[i]]

    def function_lines(self, lines: list[str], formula: Any, keep: list[str] | None = None) -> list[str]:
        """`lines` (the analysed function's, or the file's own text of it line for line) with the formula at
        the site and at each twin; every other line as given; `keep`: lines to run before the site's block."""
        body = self.body_lines(formula)
        start, stop = self.span
        out = lines[:start] + list(keep or []) + list(self.head) + [self.indent + "# swizzle: begin"] + body \
            + [self.indent + "# swizzle: end"] + list(self.after)
        position = stop
        canonical = ("pid_m", "pid_n") if len(self.site.outputs) == 2 else ("pid",)
        # a twin in another branch (stream-K's phase under `else:`) does not see names the site's branch assigned
        count = next((line.strip() for line in self.head if line.strip().startswith("swz_num_launch =")), None)
        reads_count = count is not None and any("swz_num_launch" in line for line in body)
        for twin in self.twins:
            out += lines[position:twin.start]
            out.append(f"{twin.indent}{LAUNCH} = {twin.index}")
            if reads_count:
                out.append(f"{twin.indent}{count}")
            out += [twin.indent + line[len(self.indent):] if line.startswith(self.indent) else twin.indent + line.lstrip()
                    for line in body]
            out += [f"{twin.indent}{target} = {name}" for target, name in zip(twin.targets, canonical) if target != name]
            position = twin.stop
        return out + lines[position:]

    def spliced(self, formula: Any) -> Any:
        """A jit function of the kernel copy with `formula` at the site and its twins (cached per formula)."""
        import hashlib

        import triton

        from swizzlelab.swizzle.emit import _compile_function

        key = formula.normalized_source()
        if key not in self._cache:
            lines = self.kernel_source.splitlines()
            name = re.match(r"^def\s+(\w+)", lines[0]).group(1)  # type: ignore[union-attr]
            new_name = f"{name}__swz_{hashlib.sha256(key.encode()).hexdigest()[:10]}"
            out = self.function_lines(self.template_lines, formula)
            out[0] = re.sub(r"^def\s+\w+", f"def {new_name}", out[0])
            self._cache[key] = triton.jit(_compile_function("\n".join(out) + "\n", new_name, self.fn_globals))
        return self._cache[key]

    @property
    def template_lines(self) -> list[str]:
        """The analysed function's lines from its `def` on, numbered as `span` and the twins count them."""
        return self._cache["__template__"]


class _Builtins(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and len(node.args) == 2 and not node.keywords:
            attr = "minimum" if node.func.id == "min" else "maximum"
            func = ast.Attribute(value=ast.Name(id="tl", ctx=ast.Load()), attr=attr, ctx=ast.Load())
            return ast.copy_location(ast.Call(func=func, args=node.args, keywords=[]), node)
        return node


def _axis(node: ast.AST, attr: str) -> int | None:
    """The axis of a tl.<attr>(axis) call, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl":
        args = list(node.args) + [k.value for k in node.keywords if k.arg == "axis"]
        if len(args) == 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, int):
            return int(args[0].value)
    return None


class _LaunchIndex(ast.NodeTransformer):
    """tl.program_id(0) -> swz_launch (the kernel copy's launch index)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _axis(node, "program_id") == 0:
            return ast.copy_location(ast.Name(id=LAUNCH, ctx=ast.Load()), node)
        if _axis(node, "num_programs") == 0:
            return ast.copy_location(ast.Name(id="swz_num_launch", ctx=ast.Load()), node)
        return node


class _SiteToPid(ast.NodeTransformer):
    """The site's own reads of the launch: program ids of a 2-D launch from `pid`, the loop variable as `pid`,
    its outputs renamed to pid_m/pid_n."""

    def __init__(self, rank: int, loop_var: str | None, renamed: dict[str, str]) -> None:
        self.rank, self.loop_var, self.renamed = rank, loop_var, renamed

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        axis = _axis(node, "program_id")
        if axis is None:
            return node
        pid = ast.Name(id="pid", ctx=ast.Load())
        n0 = ast.Name(id=N_AXIS0, ctx=ast.Load())
        if self.rank == 1 and axis == 0:
            # a persistent site reads its loop variable, not the program id; a 1-D site keeps its own line
            return node
        if self.rank == 2 and axis in (0, 1):
            op = ast.Mod() if axis == 0 else ast.FloorDiv()
            return ast.copy_location(ast.BinOp(left=pid, op=op, right=n0), node)
        raise KernelSiteError(f"the swizzle site reads tl.program_id({axis}): only 1-D and 2-D launch grids are handled")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.loop_var:
            return ast.copy_location(ast.Name(id="pid", ctx=node.ctx), node)
        if node.id in self.renamed:
            return ast.copy_location(ast.Name(id=self.renamed[node.id], ctx=node.ctx), node)
        return node


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _launch_rank(func: ast.FunctionDef) -> int:
    axes = [a for n in ast.walk(func) for a in (_axis(n, "program_id"), _axis(n, "num_programs")) if a is not None]
    return max(axes, default=0) + 1


def _assigned_before(func: ast.FunctionDef, line: int) -> set[str]:
    names = {a.arg for a in func.args.args}
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.lineno < line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _loop_stop(func: ast.FunctionDef, loop_var: str) -> str:
    for node in ast.walk(func):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == loop_var \
                and isinstance(node.iter, ast.Call) and node.iter.args:
            args = node.iter.args
            return ast.unparse(args[0] if len(args) == 1 else args[1])
    raise KernelSiteError(f"no `for {loop_var} in range(...)` loop holds the swizzle site")


class _Renamed(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self.mapping.get(node.id, node.id), ctx=node.ctx), node)


def _own_temporaries(tree: ast.Module, before: set[str], outputs: tuple[str, ...], after: str) -> ast.Module:
    """The site's block with names the kernel defines before it and the block reassigns (torchao's `GROUP_M =
    min(num_pid_m - first_pid_m, GROUP_M)` over its constexpr) renamed to the block's own `swz_` temporaries
    from that assignment on, so an order replacing the block leaves the kernel's value alone; refused where the
    kernel reads the reassigned value after the site (the block is then more than an order)."""
    mapping: dict[str, str] = {}
    body = []
    for stmt in tree.body:
        stmt = _Renamed(mapping).visit(stmt) if mapping else stmt
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id in before and target.id not in outputs \
                        and not target.id.startswith("swz_"):
                    if re.search(rf"\b{re.escape(target.id)}\b", after):
                        raise KernelSiteError(
                            f"the swizzle site reassigns {target.id}, which the kernel reads after it: give the lines "
                            "that only compute the tile ids with --site A-B")
                    mapping[target.id] = f"swz_{target.id}"
                    target.id = mapping[target.id]
        body.append(stmt)
    tree.body = body
    return ast.fix_missing_locations(tree)


def target_names(stmt: ast.stmt) -> list[str]:
    """Names a plain assignment or an in-kernel constant (`NAME: tl.constexpr = VALUE`) binds."""
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id]
    return []


def mark(source: str, site: SiteSpan, fn_globals: dict[str, Any], twins: tuple[Twin, ...] = ()) -> MarkedKernel:
    """Build both copies of `source` (a dedented kernel function, maybe analysed: helpers inlined, constexpr
    `if`s folded) around `site`; `twins` are further places its remap runs."""
    from swizzlelab.swizzle.emit import _compile_function

    lines = source.splitlines()
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))
    rank = _launch_rank(func)
    block = lines[site.start:site.stop]
    indent = re.match(r"\s*", next((l for l in block if l.strip()), "")).group(0)  # type: ignore[union-attr]
    try:
        tree = ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError as err:
        raise KernelSiteError(f"the swizzle site does not parse on its own: {err.msg}") from None
    outputs = site.outputs
    tree = _own_temporaries(tree, _assigned_before(func, site.start + 1), outputs, "\n".join(lines[site.stop:]))
    renamed: dict[str, str] = {}
    if len(outputs) == 2 and outputs != ("pid_m", "pid_n"):
        renamed = {outputs[0]: "pid_m", outputs[1]: "pid_n"}
    elif len(outputs) == 1 and outputs != ("pid",):
        renamed = {outputs[0]: "pid"}
    # Hoist what does not depend on the launch index (and reads nothing the kept lines assign): plain
    # assignments and in-kernel constants (`NUM_XCDS: tl.constexpr = 8`); hints (tl.assume) are dropped.
    index = site.loop_var or site.index  # the launch index the block reads from before it, if any
    tainted: set[str] = {index} if index else set()
    hoisted: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr):
            continue  # tl.assume / tl.static_assert hints: they assign nothing a formula needs
        targets = target_names(stmt)
        kept_targets = {t for s in kept for t in target_names(s)}
        text = ast.unparse(stmt)
        launch_free = "program_id" not in text and "num_programs" not in text and not (_reads(stmt) & tainted)
        if len(targets) == 1 and targets[0] not in outputs and launch_free and not (_reads(stmt) & kept_targets):
            hoisted.append(stmt)
            continue
        if isinstance(stmt, ast.AnnAssign):
            raise KernelSiteError(f"the swizzle site's `{text}` depends on the launch index: only plain "
                                  "assignments can be remapped")
        kept.append(stmt)
        tainted.update(targets)
    builtins = _Builtins()
    pre = [indent + ast.unparse(ast.fix_missing_locations(builtins.visit(s))) for s in hoisted]
    to_pid = _SiteToPid(rank, index, renamed)
    body_eval = [indent + "pid = tl.program_id(0)"] if (rank == 2 or index) else []
    body_eval += [indent + ast.unparse(ast.fix_missing_locations(to_pid.visit(builtins.visit(s)))) for s in kept]
    body_eval = [_PID_LINE.sub(rf"\g<1>pid = tl.program_id(0)", line) for line in body_eval]
    body_kernel = [re.sub(r"\btl\.program_id\(0\)", LAUNCH, line) for line in body_eval]
    defined = _assigned_before(func, site.start + 1) | {a for s in hoisted for a in target_names(s)}
    preamble: list[str] = []
    if rank == 2:
        preamble += [f"{N_AXIS0} = tl.num_programs(0)",
                     f"{LAUNCH} = tl.program_id(0) + {N_AXIS0} * tl.program_id(1)",
                     f"swz_num_launch = {N_AXIS0} * tl.num_programs(1)"]
        if "num_pid_m" not in defined and "num_pid_n" not in defined and len(outputs) == 2:
            preamble += ["num_pid_m = tl.num_programs(0)", "num_pid_n = tl.num_programs(1)"]
    elif site.loop_var:
        preamble += [f"{LAUNCH} = {site.loop_var}", f"swz_num_launch = {_loop_stop(func, site.loop_var)}"]
    elif index:
        preamble += [f"{LAUNCH} = {index}", "swz_num_launch = tl.num_programs(0)"]
    else:
        preamble += [f"{LAUNCH} = tl.program_id(0)", "swz_num_launch = tl.num_programs(0)"]
    preamble = [indent + line for line in preamble]
    after = [f"{indent}{old} = {new}" for old, new in renamed.items()]

    # the copies' twins stand as their index handed to their names: a copy is checked against what the kernel
    # reads after its site, and an inline twin reads the remap's own temporaries (it assigns them first)
    rest = list(lines)
    for twin in twins:
        if twin.inline:
            stand_in = [f"{twin.indent}{target} = {twin.index}" for target in twin.targets]
            rest[twin.start:twin.stop] = stand_in + [""] * (twin.stop - twin.start - len(stand_in))

    def build(body: list[str], with_preamble: bool) -> list[str]:
        return (lines[:site.start] + pre + (preamble if with_preamble else [])
                + [indent + "# swizzle: begin"] + body + [indent + "# swizzle: end"] + after + rest[site.stop:])

    eval_lines = build(body_eval, with_preamble=rank == 2)  # evaluation copy: swz_n0 is defined before the site
    kernel_lines = build(body_kernel, with_preamble=True)
    def_index = next(i for i, line in enumerate(kernel_lines) if re.match(r"^def\s+\w+\s*\(", line))
    eval_text = "\n".join(eval_lines[def_index:]) + "\n"
    kernel_text = "\n".join(kernel_lines[def_index:]) + "\n"
    start = site.start - def_index + len(pre) + (len(preamble) if rank == 2 else 0) + 1
    eval_site = SiteSpan(start, start + len(body_eval), ("pid_m", "pid_n") if len(outputs) == 2 else ("pid",), None)
    name = re.match(r"^def\s+(\w+)", kernel_lines[def_index]).group(1)  # type: ignore[union-attr]
    import triton

    fn = _compile_function(kernel_text, f"{name}", fn_globals)
    hoisted_names = tuple(t for s in hoisted for t in target_names(s))
    shifted = tuple(Twin(t.start - def_index, t.stop - def_index, t.index, t.targets, t.indent, t.inline)
                    for t in twins)
    marked = MarkedKernel(eval_text, eval_site, kernel_text, triton.jit(fn), hoisted_names, rank, renamed,
                          tuple(pre + preamble), tuple(after), shifted, (site.start - def_index, site.stop - def_index),
                          indent, fn_globals, synthetic_launch=bool(rank == 2 or index))
    marked._cache["__template__"] = lines[def_index:]
    return marked


_PID_LINE = re.compile(r"^(\s*)pid = tl\.program_id\(axis=0\)\s*$")
