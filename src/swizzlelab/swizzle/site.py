"""Find a kernel's swizzle site: the lines that turn the launch index into the tile ids its offsets use.

`# swizzle: begin` / `# swizzle: end` markers win; otherwise the block from `NAME = tl.program_id(...)` (or, in a
persistent kernel, from the tile loop's variable) to the last line assigning the names the offsets read.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from swizzlelab.errors import FormulaError, KernelSiteError
from swizzlelab.swizzle.lang import Statement, parse_statements

BEGIN_MARK = re.compile(r"^\s*#\s*swizzle:\s*begin\b")
END_MARK = re.compile(r"^\s*#\s*swizzle:\s*end\b")
# The one-line site the project documented first: kept as an explicit site.
CLASSIC_LINE = re.compile(r"^\s*pid\s*=\s*tl\.program_id\(\s*(axis\s*=\s*)?0\s*\)\s*(#.*)?$")
RANGE_FUNCS = ("range", "tl.range", "tl.static_range", "triton.language.range")
POINTER_HINTS = ("ptr", "stride", "desc")
LOAD_FUNCS = ("load", "store", "make_block_ptr", "make_tensor_descriptor", "atomic_add", "atomic_max", "atomic_min")


@dataclass(frozen=True)
class Site:
    """Where a kernel's swizzle site is, in the (dedented) function source it was found in.

    `start`/`stop`: 0-based line indices, the site is lines[start:stop] (`start_line`/`end_line` give the
    1-based, inclusive numbers to print). `outputs`: the names the site must yield (the tile ids the kernel's
    offsets read). `inputs`: names it reads that the kernel defines before it (parameters, earlier lines, the
    loop variable). `index_name`: the name carrying the launch index (`pid`, or `tile_id` in a persistent
    loop); `kind`: 'markers', 'program_id' or 'loop'. `lines`: the source lines taken. `definitions`: earlier
    lines, in order, that define the inputs from kernel arguments (pid-independent). `loop_count`: for a loop
    site, the expression of the number of tiles (the range's stop). `launch_rank`: the program_id axes the
    kernel reads."""

    start: int
    stop: int
    indent: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    index_name: str | None = None
    kind: str = "program_id"
    lines: tuple[str, ...] = ()
    definitions: tuple[str, ...] = ()
    loop_count: str | None = None
    launch_rank: int = 1
    kept: tuple[str, ...] = field(default=())
    file: str | None = None
    line_offset: int = 0
    # The kernel's own lines before the site in the blocks that hold it, as formula statements in source order
    # (`pid_m = tl.program_id(0) // num_pid_n`), its parameters, and the names earlier code assigns in ways a formula
    # cannot evaluate (a load, a loop), each with the line that does: what a formula continuing the kernel may read.
    prior: tuple[str, ...] = field(default=())
    params: tuple[str, ...] = field(default=())
    opaque: tuple[tuple[str, str], ...] = field(default=())

    @property
    def start_line(self) -> int:
        """1-based line of the site's first line (in `file` when known, else in the source searched)."""
        return self.line_offset + self.start + 1

    @property
    def end_line(self) -> int:
        """1-based line of the site's last line (in `file` when known, else in the source searched)."""
        return self.line_offset + self.stop

    @property
    def explicit(self) -> bool:
        """Marked by the kernel's author: markers, or the documented one-line site `pid = tl.program_id(0)`."""
        return self.kind == "markers" or (
            self.stop - self.start == 1 and bool(self.lines) and bool(CLASSIC_LINE.match(self.lines[0]))
        )

    def describe(self) -> str:
        """One line saying which lines were taken: 'lines 5-13 (found automatically): pid = ... -> pid_m, pid_n'."""
        how = {"markers": "between the swizzle markers", "loop": f"inside the loop over {self.index_name}"}.get(
            self.kind, "found automatically"
        )
        span = f"line {self.start_line}" if self.end_line <= self.start_line else f"lines {self.start_line}-{self.end_line}"
        if self.file:
            span = f"{self.file} {span}"
        body = [line.strip() for line in self.lines if line.strip() and not line.strip().startswith("#")]
        first = body[0] if body else ""
        more = f" ... {body[-1]}" if len(body) > 1 else ""
        return f"{span} ({how}): {first}{more} -> {', '.join(self.outputs)}"

    def formula_text(self) -> str:
        """The kernel's own order as a formula: the definitions it needs, then the site's lines (dedented); a
        loop site reads its tile index as the launch index."""
        head = [f"{self.index_name} = tl.program_id(0)"] if self.kind == "loop" and self.index_name else []
        body = textwrap.dedent("\n".join(self.lines)).strip("\n")
        return "\n".join([*head, *self.definitions, body]) + "\n"

    def computed_names(self) -> tuple[str, ...]:
        """The names the kernel's own lines compute up to the end of its site, in order: what a formula continuing
        them may read besides the kernel's arguments and constexprs."""
        return tuple(dict.fromkeys(line.split("=", 1)[0].strip() for line in (*self.prior, *self._own_lines())))

    def lines_for(self, names: Iterable[str], given: Collection[str] = ()) -> tuple[str, ...]:
        """The kernel's own lines that compute `names`, and what those read, in source order: its lines before the
        site, then the site's own (a fragment continues the kernel's lines: `new_pid = ...` from the tile ids the
        site computed). Names in `given` (values the caller has: arguments, constexprs, the grid's sizes) and the
        parameters end the chain; so does a name earlier code assigns in a way no formula can evaluate (`opaque`):
        the caller reports those."""
        wanted = {n for n in names if n not in given}
        taken: list[str] = []
        for line in reversed((*self.prior, *self._own_lines())):
            target = line.split("=", 1)[0].strip()
            if target not in wanted:
                continue
            # The latest assignment is the value the formula sees; what it reads comes earlier.
            wanted.discard(target)
            taken.append(line)
            wanted |= {n for n in _names_read(ast.parse(line)) if n not in given and n != "tl"}
        return tuple(reversed(taken))

    def _own_lines(self) -> tuple[str, ...]:
        """The site's lines as formula statements (a loop site's over its tile index as the launch index)."""
        head = [f"{self.index_name} = tl.program_id(0)"] if self.kind == "loop" and self.index_name else []
        try:
            statements = parse_statements("\n".join([*head, textwrap.dedent("\n".join(self.lines)).strip("\n")]))
        except (FormulaError, SyntaxError):
            return ()
        return tuple(f"{s.target} = {ast.unparse(s.expr)}" for s in statements)


KernelSite = Site  # the name of the first version, kept for callers


# ------------------------------------------------------------------------------------------------ helpers
def _function(tree: ast.Module, kernel_name: str) -> ast.FunctionDef:
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    if not functions:
        raise KernelSiteError(f"kernel {kernel_name!r}: its source holds no function definition")
    return next((f for f in functions if f.name == kernel_name), functions[0])


def _is_program_id(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "program_id"
    )


def _axis(call: ast.Call) -> int:
    args = list(call.args) + [k.value for k in call.keywords if k.arg == "axis"]
    if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, int):
        return int(args[0].value)
    return 0


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _targets(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        nodes = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        nodes = [stmt.target]
    elif isinstance(stmt, ast.For):
        nodes = [stmt.target]
    else:
        return []
    return [n.id for t in nodes for n in ast.walk(t) if isinstance(n, ast.Name)]


def plain_assignment(stmt: ast.stmt) -> ast.stmt:
    """An in-kernel constant `NAME: tl.constexpr = VALUE` as the assignment `NAME = VALUE`; other statements as
    they are."""
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return ast.copy_location(ast.Assign(targets=[stmt.target], value=stmt.value), stmt)
    return stmt


def _formula_statements(stmt: ast.stmt) -> list[Statement] | None:
    """The statement as formula statements, or None when it is not in the formula language."""
    try:
        return parse_statements(ast.unparse(plain_assignment(stmt)))
    except (FormulaError, SyntaxError):
        return None


def _is_hint(stmt: ast.stmt) -> bool:
    """tl.assume(...)-style lines: they assign nothing and may sit inside a remap block."""
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr in ("assume", "static_assert", "device_assert", "multiple_of", "max_contiguous")
    )


@dataclass
class _Kernel:
    """Facts about the kernel the site rules need."""

    func: ast.FunctionDef
    params: list[str]
    block_sizes: set[str]
    pointers: set[str]
    launch_rank: int


def _kernel_facts(func: ast.FunctionDef) -> _Kernel:
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    block_sizes: set[str] = set()
    pointers = {p for p in params if any(h in p.lower() for h in POINTER_HINTS)}
    axes = [0]
    for node in ast.walk(func):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "arange" and len(node.args) >= 2:
            block_sizes |= _names_read(node.args[1])
        if node.func.attr == "program_id":
            axes.append(_axis(node))
        if node.func.attr in LOAD_FUNCS and node.args:
            # The left-most operand of `base + offsets` inside a load/store is a pointer.
            base = node.args[0]
            while isinstance(base, ast.BinOp) and isinstance(base.op, ast.Add):
                base = base.left
            if isinstance(base, ast.Name) and base.id in params:
                pointers.add(base.id)
    block_sizes |= {p for p in params if p.upper().startswith("BLOCK")}
    return _Kernel(func, params, block_sizes, pointers, max(axes) + 1)


def _is_offset(stmt: ast.stmt, derived: set[str], kernel: _Kernel) -> bool:
    """A line that turns tile ids into element offsets: a derived value times a block size, or pointer/stride
    arithmetic. It ends the remap."""
    value = getattr(stmt, "value", None)
    if value is None:
        return False
    if _names_read(value) & kernel.pointers:
        return True
    for node in ast.walk(value):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = _names_read(node.left), _names_read(node.right)
            if (left & derived and right & kernel.block_sizes) or (right & derived and left & kernel.block_sizes):
                return True
    return False


def _reads_after(body: list[ast.stmt], index: int, extra: list[ast.stmt]) -> set[str]:
    """Names body[index + 1:] and `extra` (code after the enclosing block) read before they assign them again:
    a later statement that recomputes a name from scratch (a second inlined remap) does not keep it live."""
    names: set[str] = set()
    written: set[str] = set()
    for stmt in body[index + 1 :] + extra:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and all(
            isinstance(t, ast.Name) for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        ):
            names |= _names_read(stmt.value) - written if stmt.value is not None else set()
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id not in written:
                names.add(stmt.target.id)
            written |= set(_targets(stmt))
            continue
        # compound statements: any read inside counts (their branches may run in any order)
        names |= _names_read(stmt) - written
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    return names


def _order_outputs(names: set[str], assigned_order: list[str]) -> tuple[str, ...]:
    ordered = [n for n in assigned_order if n in names]
    if len(ordered) == 2 and ordered[0].endswith("_n") and ordered[1].endswith("_m"):
        ordered.reverse()
    return tuple(ordered)


@dataclass
class _Run:
    body: list[ast.stmt]
    first: int  # index in body of the first statement taken
    last: int  # index in body of the last statement taken (inclusive)
    outputs: tuple[str, ...]
    index_name: str | None


def _remap_run(
    body: list[ast.stmt], first: int, seeds: set[str], kernel: _Kernel, after: list[ast.stmt], min_last: int
) -> _Run | None:
    """The remap block starting at body[first]: consecutive formula lines, ended before the first offset line
    or other code; its end is the last line after which one or two derived names are read later."""
    derived = set(seeds)
    candidates: list[tuple[int, set[str]]] = []
    assigned_order: list[str] = []
    for index in range(first, len(body)):
        stmt = body[index]
        if _is_hint(stmt):
            continue
        statements = _formula_statements(stmt)
        if statements is None and _is_program_id(getattr(stmt, "value", None)):
            statements = []  # a program_id line of any spelling; its name is a seed
        if statements is None or _is_offset(stmt, derived, kernel):
            break
        reads = _names_read(stmt)
        targets = _targets(stmt)
        is_derived = bool(reads & derived) or any(t in seeds for t in targets)
        if is_derived:
            derived |= set(targets)
        assigned_order += [t for t in targets if t not in assigned_order]
        if not is_derived or index < min_last:
            continue
        later = _reads_after(body, index, after)
        live = {n for n in derived if n in later and n in assigned_order}
        # A 1-D launch index read again later (e.g. for a split-k slot) is not a tile id once others are; on a
        # 2-D launch each program id may itself be a tile id.
        if len(seeds) == 1 and live - seeds:
            live -= seeds
        candidates.append((index, live))
    good = [(index, live) for index, live in candidates if 1 <= len(live) <= 2]
    if not good:
        return None
    last, live = good[-1]
    return _Run(body, first, last, _order_outputs(live, assigned_order), None)


def _range_call(loop: ast.For) -> ast.Call | None:
    call = loop.iter
    if isinstance(call, ast.Call) and ast.unparse(call.func) in RANGE_FUNCS and call.args:
        return call
    return None


def _helper_call_error(stmt: ast.stmt, kernel_name: str, index_name: str, line_offset: int) -> KernelSiteError:
    callee = ast.unparse(stmt.value.func)  # type: ignore[attr-defined]
    return KernelSiteError(
        f"kernel {kernel_name!r}: line {line_offset + stmt.lineno} computes the tile ids from {index_name} with a call of "
        f"{callee}(...): inline the helper's body there, or wrap the lines to replace in "
        "'# swizzle: begin' / '# swizzle: end'"
    )


# ------------------------------------------------------------------------------------------------ finding
def _marker_site(lines: list[str], func: ast.FunctionDef, kernel: _Kernel, kernel_name: str) -> Site | None:
    begins = [i for i, line in enumerate(lines) if BEGIN_MARK.match(line)]
    ends = [i for i, line in enumerate(lines) if END_MARK.match(line)]
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0] <= begins[0]:
        raise KernelSiteError(
            f"kernel {kernel_name!r} must have exactly one '# swizzle: begin' followed by one '# swizzle: end'"
        )
    start, stop = begins[0] + 1, ends[0]
    block = textwrap.dedent("\n".join(lines[start:stop]))
    try:
        block_tree = ast.parse(block)
    except SyntaxError as err:
        raise KernelSiteError(f"kernel {kernel_name!r}: its swizzle block does not parse: {err.msg}") from None
    assigned: list[str] = []
    for stmt in block_tree.body:
        assigned += [t for t in _targets(stmt) if t not in assigned]
    later: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and getattr(node, "lineno", 0) > stop:
            later.add(node.id)
    outputs = _order_outputs({n for n in assigned if n in later}, assigned)
    if not outputs or len(outputs) > 2:
        outputs = tuple(n for n in ("pid_m", "pid_n") if n in assigned) or ("pid",)
    index_name = next(
        (s.targets[0].id for s in block_tree.body if isinstance(s, ast.Assign) and _is_program_id(s.value)
         and isinstance(s.targets[0], ast.Name)),
        None,
    )
    indent = re.match(r"\s*", lines[begins[0]]).group(0)  # type: ignore[union-attr]
    site = Site(start, stop, indent, outputs, (), index_name, "markers", tuple(lines[start:stop]), (), None,
                kernel.launch_rank)
    return _with_inputs(site, lines, func, kernel, block_tree.body)


def _automatic_site(lines: list[str], func: ast.FunctionDef, kernel: _Kernel, kernel_name: str,
                    line_offset: int = 0) -> Site:
    body = func.body
    pid_statements = [
        i for i, stmt in enumerate(body)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        and _is_program_id(stmt.value)
    ]
    if not pid_statements:
        raise KernelSiteError(
            f"kernel {kernel_name!r} has no swizzle site: it assigns no name from tl.program_id(...) in its body; "
            "add `pid = tl.program_id(0)` or wrap the lines computing the tile ids in "
            "'# swizzle: begin' / '# swizzle: end'"
        )
    seeds = {body[i].targets[0].id for i in pid_statements}  # type: ignore[attr-defined]
    first = pid_statements[0]
    # The program_id lines of one launch belong together: the site spans all of them that follow each other.
    min_last = first
    for i in pid_statements[1:]:
        if all(_formula_statements(body[j]) is not None or _is_program_id(getattr(body[j], "value", None))
               for j in range(first, i + 1)):
            min_last = i
    run = _remap_run(body, first, seeds, kernel, [], min_last)
    loop_site = _loop_site(lines, body, first, seeds, kernel, kernel_name, line_offset)
    if loop_site is not None:
        return loop_site
    if run is None:
        run = _Run(body, first, first, (body[first].targets[0].id,), None)  # type: ignore[attr-defined]
    index_name = body[first].targets[0].id if len(pid_statements) == 1 else None  # type: ignore[attr-defined]
    return _site_from_run(lines, func, kernel, run, "program_id", index_name, None)


def _loop_site(
    lines: list[str], body: list[ast.stmt], first: int, seeds: set[str], kernel: _Kernel, kernel_name: str,
    line_offset: int = 0,
) -> Site | None:
    """A persistent kernel: `for tile_id in range(start_pid, num_tiles, NUM_SMS)` with the remap of tile_id
    to tile ids inside the loop. None when the kernel has no such loop (or no remap inside it)."""
    derived = set(seeds)
    for stmt in body[first:]:
        if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
            call = _range_call(stmt)
            # Persistent: the loop starts at a launch-derived tile and strides by a program count (NUM_SMS,
            # tl.num_programs), not by a block size as a loop over offsets does.
            if call is None or len(call.args) < 3 or not (_names_read(call.args[0]) & derived):
                continue
            if _names_read(call.args[2]) & kernel.block_sizes:
                continue
            index = stmt.target.id
            start = next((i for i, s in enumerate(stmt.body) if index in _names_read(s)), None)
            if start is None:
                return None
            inner = stmt.body[start]
            if isinstance(getattr(inner, "value", None), ast.Call) and _formula_statements(inner) is None:
                if not _is_offset(inner, {index}, kernel):
                    raise _helper_call_error(inner, kernel_name, index, line_offset)
            run = _remap_run(stmt.body, start, {index}, kernel, [], start)
            if run is None:
                return None
            count = call.args[1] if len(call.args) >= 2 else call.args[0]
            return _site_from_run(lines, kernel.func, kernel, run, "loop", index, ast.unparse(count))
        if (
            isinstance(stmt, (ast.Assign, ast.AugAssign))
            and _names_read(stmt) & derived
            and not _is_offset(stmt, derived, kernel)
        ):
            derived |= set(_targets(stmt))
    return None


def _site_from_run(
    lines: list[str],
    func: ast.FunctionDef,
    kernel: _Kernel,
    run: _Run,
    kind: str,
    index_name: str | None,
    loop_count: str | None,
) -> Site:
    first_stmt, last_stmt = run.body[run.first], run.body[run.last]
    start = first_stmt.lineno - 1
    stop = last_stmt.end_lineno or last_stmt.lineno
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    site = Site(start, stop, indent, run.outputs, (), index_name, kind, tuple(lines[start:stop]), (), loop_count,
                kernel.launch_rank)
    return _with_inputs(site, lines, func, kernel, run.body[run.first : run.last + 1])


def _with_inputs(site: Site, lines: list[str], func: ast.FunctionDef, kernel: _Kernel, stmts: list[ast.stmt]) -> Site:
    """Fill in inputs (names read that are defined before the site), the earlier lines that define them, and the
    pid-independent lines of the site itself that a replacement must keep."""
    before: dict[str, ast.stmt | None] = {p: None for p in kernel.params}
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)) and node.lineno <= site.start:
            for name in _targets(node):
                before[name] = node if not isinstance(node, ast.For) else None
    assigned_in_site: set[str] = set()
    inputs: list[str] = []
    for stmt in stmts:
        reads = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):
            name = node.id
            if name in before and name not in assigned_in_site and name not in inputs:
                inputs.append(name)
        assigned_in_site |= set(_targets(stmt))
    # Earlier lines defining the inputs from kernel arguments, transitively, in source order.
    needed: dict[int, ast.stmt] = {}
    pending = [n for n in inputs if before.get(n) is not None]
    while pending:
        name = pending.pop()
        stmt = before.get(name)
        if stmt is None or id(stmt) in needed or _formula_statements(stmt) is None:
            continue
        needed[id(stmt)] = stmt
        pending += [n for n in _names_read(stmt) if before.get(n) is not None]
    definitions = tuple(ast.unparse(plain_assignment(s)) for s in sorted(needed.values(), key=lambda s: s.lineno))
    # Lines inside the site that do not depend on the launch index (e.g. `num_pid_m = tl.cdiv(M, BLOCK_M)`).
    seeds = {site.index_name} if site.index_name else set()
    derived = set(seeds)
    kept = []
    for stmt in stmts:
        reads = _names_read(stmt)
        if _is_program_id(getattr(stmt, "value", None)) or reads & derived:
            derived |= set(_targets(stmt))
        elif _targets(stmt) and _formula_statements(stmt) is not None:
            kept.append(ast.unparse(plain_assignment(stmt)))
    prior, opaque = _prior_lines(func.body, site.start)
    return replace(site, inputs=tuple(inputs), definitions=definitions, kept=tuple(kept), prior=prior,
                   params=tuple(kernel.params), opaque=opaque)


def _prior_lines(body: list[ast.stmt], start: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The formula lines of `body` before source line index `start` (0-based: the site's first line is start + 1),
    descending into the compound statement that holds the site; and (name, line) for what earlier code assigns
    that no formula can evaluate (a load, a loop, a branch)."""
    lines: list[str] = []
    opaque: list[tuple[str, str]] = []
    for stmt in body:
        if stmt.lineno > start:
            break
        where = f"line {stmt.lineno}: {ast.unparse(stmt).splitlines()[0]}"
        if (stmt.end_lineno or stmt.lineno) <= start:
            compound = isinstance(stmt, (ast.For, ast.While, ast.If, ast.With))
            statements = None if compound else _formula_statements(stmt)
            if statements is not None:
                lines += [f"{s.target} = {ast.unparse(s.expr)}" for s in statements]
                continue
            opaque += [(name, where) for node in ast.walk(stmt) for name in _targets(node)]
            continue
        if isinstance(stmt, ast.For):
            opaque += [(name, where) for name in _targets(stmt)]
        for part in (getattr(stmt, "body", []), getattr(stmt, "orelse", [])):
            if part and part[0].lineno <= start + 1 <= (part[-1].end_lineno or part[-1].lineno):
                more, hidden = _prior_lines(part, start)
                lines += more
                opaque += hidden
    return tuple(lines), tuple(opaque)


def find_site(source: str, kernel_name: str = "kernel", line_offset: int = 0) -> Site:
    """Locate the swizzle site in a kernel's source (one function, dedented, decorators allowed).

    Markers win. Otherwise: the block from the first `NAME = tl.program_id(...)` line (any spelling, `axis=`
    included) through consecutive formula lines, ending at the last line after which the names the kernel reads
    later are one or two tile ids, and before the first line that makes offsets of them (a tile id times a
    block size, pointer or stride arithmetic). In a persistent kernel (`for tile_id in range(start_pid, ...)`)
    the site is the remap of the loop variable inside the loop. KernelSiteError when there is none; the lines it
    names are file lines when `line_offset` (the file line before the source's first) is given."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise KernelSiteError(f"kernel {kernel_name!r}: its source does not parse: {err.msg}") from None
    func = _function(tree, kernel_name)
    kernel = _kernel_facts(func)
    marked = _marker_site(lines, func, kernel, kernel_name)
    if marked is not None:
        return marked
    return _automatic_site(lines, func, kernel, kernel_name, line_offset)


def kernel_site(kernel: Any) -> Site:
    """The site of a @triton.jit kernel (autotuned or not), with line numbers in the kernel's file."""
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    try:
        raw_lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError) as err:
        raise KernelSiteError(f"cannot read the source of kernel {getattr(fn, '__name__', fn)!r}: {err}") from None
    site = find_site(textwrap.dedent("".join(raw_lines)), fn.__name__, line_offset=first_line - 1)
    return replace(site, file=inspect.getsourcefile(fn), line_offset=first_line - 1)


def reads_program_id(code: str) -> bool:
    """Whether a file's source defines a @triton.jit function that reads its program id (a remap site, or the id
    read directly): from the text alone, nothing of it runs (the leaderboard asks this of untrusted code)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        jit = any("jit" in ast.unparse(d) for d in node.decorator_list)
        if jit and any(isinstance(n, ast.Attribute) and n.attr == "program_id" for n in ast.walk(node)):
            return True
    return False


def _statement_lists(node: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list under `node`: its body, and those of its loops' and branches' bodies."""
    lists: list[list[ast.stmt]] = []
    for sub in ast.walk(node):
        for name in ("body", "orelse"):
            block = getattr(sub, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                lists.append(block)
    return lists


def remap_sites(source: str, kernel_name: str = "kernel") -> list[Site]:
    """Every remap block of a kernel, in source order: in any statement list (the body, a loop's, a branch's), a
    run of formula lines turning a name derived from the launch (a program id, what is computed from it, a loop
    variable over such names) into one or two tile ids, ended by a line making offsets of them (stream-K's
    data-parallel remap under `if pid < total_ddp_tiles:` and its stream-K one in a loop over `curr_tile`, or
    the same remap inline in two loops). find_site's own site is one of them where it is not the bare program
    id line."""
    lines = source.splitlines()
    func = _function(ast.parse(source), kernel_name)
    kernel = _kernel_facts(func)
    derived: set[str] = set()
    for _ in range(8):  # launch-derived names, to a fixed point (loops and assignments at any depth)
        before = len(derived)
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and (_is_program_id(node.value) or _names_read(node.value) & derived):
                derived |= set(_targets(node))
            elif isinstance(node, ast.For) and _names_read(node.iter) & derived:
                derived |= set(_targets(node))
        if len(derived) == before:
            break
    sites: list[Site] = []
    for body in _statement_lists(func):
        index = 0
        while index < len(body):
            stmt = body[index]
            seeds = _names_read(stmt) & derived if isinstance(stmt, ast.Assign) else set()
            run = _remap_run(body, index, seeds, kernel, [], index) if seeds and not _is_program_id(stmt.value) else None  # type: ignore[attr-defined]
            nxt = body[run.last + 1] if run is not None and run.last + 1 < len(body) else None
            if run is None or nxt is None or not _is_offset(nxt, set(run.outputs), kernel) or run.last == index:
                index += 1
                continue
            site = _site_from_run(lines, func, kernel, run, "program_id", None, None)
            sites.append(replace(site, index_name=sorted(seeds)[0] if len(seeds) == 1 else None))
            index = run.last + 1
    return sorted(sites, key=lambda s: s.start)
