"""Parse swizzle formula text (a Python-like subset of Triton) into a validated, immutable Formula.

Only whitelisted syntax passes; anything else is a FormulaError naming the line, the construct and the fix.
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from swizzlelab.errors import FormulaError, UserError

BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
CMPOPS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}
UNARYOPS: dict[type[ast.unaryop], str] = {ast.USub: "-", ast.UAdd: "+"}
# tl function -> number of positional arguments
TL_FUNCS: dict[str, int] = {
    "program_id": 1,
    "num_programs": 1,
    "cdiv": 2,
    "minimum": 2,
    "maximum": 2,
    "where": 3,
}
# Python builtins Triton accepts on integers, and the tl function each one means.
BUILTINS: dict[str, str] = {"min": "minimum", "max": "maximum"}
# Statements with no value that engineers paste along with a remap block; they change no program id.
IGNORED_TL_STATEMENTS = frozenset({"assume", "static_assert", "device_assert", "debug_barrier", "multiple_of"})
OUTPUT_CANDIDATES_2D = ("pid_m", "pid_n")
OUTPUT_CANDIDATES_1D = ("pid",)
# The only import tolerated, because engineers paste it along with the formula.
ALLOWED_IMPORT = "import triton.language as tl"
# The fix for constructs people paste from kernels, by callee (attribute or function name).
CALL_FIXES: dict[str, str] = {
    "math.ceil": "use tl.cdiv(a, b)",
    "triton.cdiv": "use tl.cdiv(a, b)",
    "tl.min": "use tl.minimum(a, b) (tl.min reduces a tensor)",
    "tl.max": "use tl.maximum(a, b) (tl.max reduces a tensor)",
    "abs": "use tl.where(x < 0, -x, x)",
    "tl.abs": "use tl.where(x < 0, -x, x)",
    "tl.arange": "a formula computes scalar program ids; the tl.arange offsets belong after the swizzle site",
    "tl.load": "a formula computes program ids from the launch only; load values after the swizzle site",
    "int": "drop the int(...) cast: formula values are integers",
}


@dataclass(frozen=True)
class Statement:
    """One assignment `target = expr` of a formula, with its 1-based line in the source."""

    target: str
    expr: ast.expr
    lineno: int


@dataclass(frozen=True)
class Formula:
    """A parsed swizzle formula: ordered assignments, the names it yields and the names it needs."""

    source: str
    statements: tuple[Statement, ...]
    outputs: tuple[str, ...]
    launch_rank: int
    free_names: tuple[str, ...]
    assigned_names: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        """A short hash of the normalised text: equal for formulas that differ only in spacing/comments."""
        body = "\n".join(f"{s.target} = {ast.unparse(s.expr)}" for s in self.statements)
        body += "\n->" + ",".join(self.outputs)
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def normalized_source(self) -> str:
        """The formula as canonical Python text, one assignment a line."""
        return "\n".join(f"{s.target} = {ast.unparse(s.expr)}" for s in self.statements) + "\n"


def _construct_name(node: ast.AST) -> str:
    names = {
        ast.Attribute: "attribute access",
        ast.Call: "function call",
        ast.For: "loop (for): a formula is straight-line code; unroll it or use a closed form",
        ast.While: "loop (while): a formula is straight-line code; unroll it or use a closed form",
        ast.Import: "import",
        ast.ImportFrom: "import",
        ast.FunctionDef: "function definition (inline the helper's body into the formula)",
        ast.Lambda: "lambda",
        ast.Subscript: "subscript",
        ast.List: "list",
        ast.Tuple: "tuple",
        ast.Dict: "dict",
        ast.BoolOp: "'and'/'or' (use & and | on comparisons)",
        ast.Div: "true division '/' (use '//')",
        ast.Pow: "power '**' (use << for powers of two, or multiply)",
        ast.MatMult: "matrix product '@'",
        ast.If: "if statement (use `a if cond else b` or tl.where)",
        ast.Return: "return (a formula ends by assigning its outputs, e.g. pid_m and pid_n)",
    }
    for kind, label in names.items():
        if isinstance(node, kind):
            return label
    return type(node).__name__


def _fail(node: ast.AST, what: str) -> FormulaError:
    line = getattr(node, "lineno", "?")
    return FormulaError(f"formula line {line}: {what} is not allowed in a swizzle formula")


def _callee(func: ast.expr) -> str:
    try:
        return ast.unparse(func)
    except Exception:  # pragma: no cover - unparse handles every expression node
        return type(func).__name__


def _tl_func_name(func: ast.expr) -> str | None:
    """'minimum' for `tl.minimum`, None for anything not of the form tl.<name>."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "tl":
        return func.attr
    return None


def _tl_attr(name: str) -> ast.Attribute:
    return ast.Attribute(value=ast.Name(id="tl", ctx=ast.Load()), attr=name, ctx=ast.Load())


def _builtin_call(node: ast.Call) -> ast.Call:
    """`min(a, b, c)` -> `tl.minimum(tl.minimum(a, b), c)`: Triton treats the builtins so on integers."""
    name = node.func.id  # type: ignore[attr-defined]
    if node.keywords:
        raise _fail(node, f"keyword argument '{node.keywords[0].arg}' to {name}()")
    if len(node.args) < 2:
        raise FormulaError(
            f"formula line {node.lineno}: {name}() needs at least two integer arguments, e.g. {name}(a, b)"
        )
    call = node.args[0]
    for arg in node.args[1:]:
        call = ast.Call(func=_tl_attr(BUILTINS[name]), args=[call, arg], keywords=[])
    return ast.copy_location(call, node)  # type: ignore[return-value]


def _check_tl_call(node: ast.Call) -> None:
    func = node.func
    attr = _tl_func_name(func)
    allowed = f"tl.{', tl.'.join(TL_FUNCS)}, min, max"
    if attr is None or attr not in TL_FUNCS:
        callee = _callee(func)
        fix = CALL_FIXES.get(callee)
        if fix is None and isinstance(func, ast.Name):
            fix = f"inline what {callee}() computes (the language allows {allowed})"
        if fix is None and isinstance(func, ast.Attribute) and func.attr == "to":
            fix = "drop the .to(...) cast: formulas evaluate every value exactly and report int32 overflow"
        if fix is None:
            fix = f"the language allows {allowed}"
        raise FormulaError(f"formula line {node.lineno}: call of '{callee}' is not allowed in a swizzle formula: {fix}")
    expected = TL_FUNCS[attr]
    args = list(node.args)
    for keyword in node.keywords:
        if attr in ("program_id", "num_programs") and keyword.arg == "axis":
            args.append(keyword.value)
        else:
            raise _fail(node, f"keyword argument '{keyword.arg}' to tl.{attr}")
    if len(args) != expected:
        raise FormulaError(f"formula line {node.lineno}: tl.{attr} takes {expected} argument(s), got {len(args)}")
    if attr in ("program_id", "num_programs"):
        axis = args[0]
        if not (isinstance(axis, ast.Constant) and type(axis.value) is int and 0 <= axis.value <= 2):
            raise FormulaError(f"formula line {node.lineno}: tl.{attr} needs a constant axis 0, 1 or 2")
    # Normalise `axis=` keywords to positional so later stages see one shape.
    node.args = args
    node.keywords = []


class _Normalise(ast.NodeTransformer):
    """Rewrite the accepted spellings to one form: builtin min/max become tl.minimum/tl.maximum."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in BUILTINS:
            return _builtin_call(node)
        return node


def _check_expr(node: ast.expr) -> None:
    """Raise FormulaError unless every node under `node` is whitelisted."""
    if isinstance(node, ast.Name):
        if node.id == "tl":
            raise _fail(node, "bare 'tl'")
        return
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, bool):
            raise _fail(node, f"constant {node.value!r} (only integers)")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in BINOPS:
            raise _fail(node, _construct_name(node.op))
        _check_expr(node.left)
        _check_expr(node.right)
        return
    if isinstance(node, ast.UnaryOp):
        if type(node.op) not in UNARYOPS:
            raise _fail(node, f"unary operator {type(node.op).__name__}")
        _check_expr(node.operand)
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in CMPOPS:
                raise _fail(node, f"comparison {type(op).__name__}")
        _check_expr(node.left)
        for comparator in node.comparators:
            _check_expr(comparator)
        return
    if isinstance(node, ast.IfExp):
        for part in (node.test, node.body, node.orelse):
            _check_expr(part)
        return
    if isinstance(node, ast.Call):
        _check_tl_call(node)
        for arg in node.args:
            _check_expr(arg)
        return
    raise _fail(node, _construct_name(node))


def _max_axis(node: ast.AST) -> int:
    best = -1
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("program_id", "num_programs")
        ):
            best = max(best, int(sub.args[0].value))  # type: ignore[attr-defined]
    return best


def _is_allowed_import(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Import)
        and len(stmt.names) == 1
        and stmt.names[0].name == "triton.language"
        and stmt.names[0].asname == "tl"
    )


def _is_ignored_expression(stmt: ast.stmt) -> bool:
    """A docstring, or a tl.assume(...)-style hint pasted with the block: it assigns nothing."""
    if not isinstance(stmt, ast.Expr):
        return False
    if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return True
    return isinstance(stmt.value, ast.Call) and _tl_func_name(stmt.value.func) in IGNORED_TL_STATEMENTS


def _checked_value(stmt: ast.stmt, value: ast.expr) -> ast.expr:
    value = _Normalise().visit(value)
    _check_expr(value)
    return value


def _statements(tree: ast.Module) -> list[Statement]:
    statements: list[Statement] = []
    for stmt in tree.body:
        if _is_allowed_import(stmt) or _is_ignored_expression(stmt):
            continue
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _fail(stmt, "chained assignment `a = b = ...` (write one assignment per line)")
            target_node = stmt.targets[0]
            if isinstance(target_node, ast.Tuple):
                statements.extend(_tuple_assignment(stmt, target_node))
                continue
            if not isinstance(target_node, ast.Name):
                raise _fail(stmt, "assignment to anything but one plain name")
            target = target_node.id
            if target == "tl":
                raise _fail(stmt, "assignment to 'tl'")
            statements.append(Statement(target, _checked_value(stmt, stmt.value), stmt.lineno))
            continue
        if isinstance(stmt, ast.AugAssign):
            # `x += e` is `x = x + (e)` on integers, as Triton compiles it.
            if not isinstance(stmt.target, ast.Name):
                raise _fail(stmt, "augmented assignment to anything but one plain name")
            if type(stmt.op) not in BINOPS:
                raise _fail(stmt, _construct_name(stmt.op))
            value = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
            ast.copy_location(value, stmt)
            statements.append(Statement(stmt.target.id, _checked_value(stmt, value), stmt.lineno))
            continue
        if isinstance(stmt, ast.AnnAssign):
            raise _fail(stmt, "annotated assignment (drop the annotation)")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            raise _fail(stmt, f"a bare call of '{_callee(stmt.value.func)}' (a formula only assigns names)")
        raise _fail(stmt, _construct_name(stmt))
    return statements


def parse_statements(text: str) -> list[Statement]:
    """The formula statements of `text` (FormulaError/SyntaxError when it is not in the language)."""
    return _statements(ast.parse(text))


def _tuple_assignment(stmt: ast.Assign, target: ast.Tuple) -> list[Statement]:
    """`a, b = x, y` as two assignments, when no right-hand side reads a name the line assigns."""
    if not all(isinstance(t, ast.Name) for t in target.elts):
        raise _fail(stmt, "assignment to anything but plain names")
    names = [t.id for t in target.elts]  # type: ignore[attr-defined]
    value = stmt.value
    if isinstance(value, ast.Call):
        raise FormulaError(
            f"formula line {stmt.lineno}: {', '.join(names)} come from a call of '{_callee(value.func)}': "
            "inline the helper's body into the formula (formulas cannot call functions)"
        )
    if not isinstance(value, ast.Tuple) or len(value.elts) != len(names):
        raise _fail(stmt, "tuple assignment whose right side is not a tuple of the same length")
    read = {n.id for elt in value.elts for n in ast.walk(elt) if isinstance(n, ast.Name)}
    if read & set(names):
        raise _fail(stmt, "tuple assignment that reads the names it assigns (write one assignment per line)")
    return [Statement(name, _checked_value(stmt, elt), stmt.lineno) for name, elt in zip(names, value.elts)]


def _free_and_assigned(statements: list[Statement]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    assigned: list[str] = []
    free: list[str] = []
    for stmt in statements:
        for sub in ast.walk(stmt.expr):
            if isinstance(sub, ast.Name) and sub.id != "tl" and sub.id not in assigned and sub.id not in free:
                free.append(sub.id)
        if stmt.target not in assigned:
            assigned.append(stmt.target)
    return tuple(free), tuple(assigned)


def _last_index(statements: list[Statement] | tuple[Statement, ...]) -> dict[str, int]:
    return {s.target: i for i, s in enumerate(statements)}


def default_outputs(assigned: tuple[str, ...]) -> tuple[str, ...] | None:
    """pid_m/pid_n when both are assigned, else pid when assigned, else None (kept for callers of old)."""
    if all(name in assigned for name in OUTPUT_CANDIDATES_2D):
        return OUTPUT_CANDIDATES_2D
    if "pid" in assigned:
        return OUTPUT_CANDIDATES_1D
    return None


def _sinks(statements: list[Statement]) -> list[Statement]:
    """Final assignments whose value no later line reads, in order."""
    out = []
    for index, stmt in enumerate(statements):
        later = statements[index + 1 :]
        if any(s.target == stmt.target for s in later):
            continue
        if any(isinstance(n, ast.Name) and n.id == stmt.target for s in later for n in ast.walk(s.expr)):
            continue
        out.append(stmt)
    return out


def _reads_launch(statements: list[Statement]) -> bool:
    """Whether the statements read a program id or a name they do not assign first (a kernel's own)."""
    free, _ = _free_and_assigned(statements)
    return bool(free) or any(_max_axis(s.expr) >= 0 for s in statements)


def _choose_outputs(statements: list[Statement], rank: int | None) -> tuple[str, ...]:
    """The outputs a formula yields when none are named: pid_m, pid_n on 2-D grids, pid on 1-D ones, else the
    one value a fragment ends with.

    A formula that assigns only one of pid_m/pid_n is an error (nothing may fill in the other); on a 1-D
    grid pid_m/pid_n are intermediates when pid is assigned after them."""
    last = _last_index(statements)
    has_m, has_n, has_pid = "pid_m" in last, "pid_n" in last, "pid" in last
    sinks = _sinks(statements)
    if has_m or has_n:
        last_mn = max(last.get("pid_m", -1), last.get("pid_n", -1))
        pid_after = has_pid and last["pid"] > last_mn
        if pid_after and (rank == 1 or not (has_m and has_n)):
            return OUTPUT_CANDIDATES_1D
        if not (has_m and has_n):
            present, missing = ("pid_m", "pid_n") if has_m else ("pid_n", "pid_m")
            raise FormulaError(
                f"formula assigns {present} but never {missing}: a 2-D order assigns both pid_m and pid_n "
                f"(add a line `{missing} = ...`)"
            )
        return OUTPUT_CANDIDATES_2D
    if has_pid:
        return OUTPUT_CANDIDATES_1D
    if len(sinks) == 1 and sinks[0] is statements[-1] and _reads_launch(statements):
        # A fragment that continues a kernel's own lines (`new_pid = ...` from the kernel's pid_m, pid_n) ends
        # with the one value it computes: the remapped linear tile index.
        return (sinks[0].target,)
    names = ",".join(s.target for s in sinks[-2:])
    raise FormulaError(
        "formula assigns neither `pid` nor both `pid_m` and `pid_n`: assign the names the kernel uses, "
        f"or name the outputs, e.g. --outputs {names}"
    )


def _check_no_dead_tail(statements: list[Statement], outputs: tuple[str, ...]) -> None:
    """A line after the outputs' last assignment that nothing reads: the user's real output, most likely."""
    last = _last_index(statements)
    last_output = max(last[name] for name in outputs)
    for stmt in _sinks(statements):
        if stmt.target not in outputs and last[stmt.target] > last_output:
            raise FormulaError(
                f"formula line {stmt.lineno} assigns '{stmt.target}' after the outputs ({', '.join(outputs)}) "
                f"and nothing reads it: if it is the remapped id, name it as the output (--outputs {stmt.target}), "
                "else delete the line"
            )


def _parse_tree(text: str) -> ast.Module:
    """Parse text pasted from a kernel: common indentation removed, also when the first line lost it."""
    attempts = [textwrap.dedent(text)]
    lines = text.splitlines()
    if lines and lines[0].strip():
        # Copied from the middle of an indented line: the first line starts at column 0, the rest do not.
        attempts.append(lines[0].lstrip() + "\n" + textwrap.dedent("\n".join(lines[1:])))
    first_error: SyntaxError | None = None
    for attempt in attempts:
        try:
            return ast.parse(attempt, mode="exec")
        except SyntaxError as err:
            first_error = first_error or err
    assert first_error is not None
    detail = (first_error.msg or "invalid syntax").split("\n")[0]
    raise FormulaError(f"formula line {first_error.lineno}: syntax error: {detail}") from None


def parse_formula(
    text: str, outputs: tuple[str, ...] | list[str] | None = None, rank: int | None = None
) -> Formula:
    """Parse and validate formula text (indented text pasted from a kernel is dedented).

    `outputs` defaults by what the formula assigns and by the tile grid's `rank` when known: (pid_m, pid_n)
    on 2-D grids, (pid,) on 1-D grids (where pid_m/pid_n assigned before the last `pid = ...` are
    intermediates). A formula that does not assign every output is an error naming the missing one."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("empty formula: write assignments such as `pid = tl.program_id(0)`")
    statements = _statements(_parse_tree(text))
    if not statements:
        raise FormulaError("formula has no assignments: write e.g. `pid = tl.program_id(0)`")
    free, assigned = _free_and_assigned(statements)
    if outputs is None:
        outputs = _choose_outputs(statements, rank)
        _check_no_dead_tail(statements, outputs)
    outputs = tuple(str(o).strip() for o in outputs)
    if not outputs or not all(o.isidentifier() for o in outputs):
        raise FormulaError(f"outputs {','.join(outputs)!r}: name one or two assigned names, e.g. pid_m,pid_n")
    if len(set(outputs)) != len(outputs):
        raise FormulaError(f"outputs {','.join(outputs)!r} name the same variable twice")
    for name in outputs:
        if name not in assigned:
            raise FormulaError(
                f"formula never assigns output '{name}' (it assigns {', '.join(assigned)}): "
                f"add a line `{name} = ...` or name other outputs"
            )
    launch_rank = max((_max_axis(s.expr) for s in statements), default=-1) + 1
    return Formula(
        source=text,
        statements=tuple(statements),
        outputs=outputs,
        launch_rank=max(launch_rank, 1),
        free_names=free,
        assigned_names=assigned,
    )


def read_formula_file(path: str | Path) -> str:
    """The text of a formula file; a directory, a missing, unreadable or binary file is a one-line UserError."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a directory: give a formula .py file or a family spec such as grouped:GROUP_M=8")
    if not path.exists():
        raise UserError(f"formula file {path} does not exist")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"cannot read formula file {path}: {err.strerror or err}") from None
    if b"\0" in data:
        raise UserError(f"formula file {path} is binary, not text: give a .py file of assignments")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(
            f"formula file {path} is not UTF-8 text (byte {err.start}): give a .py file of assignments"
        ) from None


def rename(formula: Formula, mapping: dict[str, str]) -> Formula:
    """A copy of `formula` with names renamed (both where assigned and where read)."""

    class _Renamer(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.copy_location(ast.Name(id=mapping.get(node.id, node.id), ctx=node.ctx), node)

    new_statements = []
    for stmt in formula.statements:
        expr = _Renamer().visit(ast.parse(ast.unparse(stmt.expr), mode="eval").body)
        new_statements.append(Statement(mapping.get(stmt.target, stmt.target), expr, stmt.lineno))
    text = "\n".join(f"{s.target} = {ast.unparse(s.expr)}" for s in new_statements) + "\n"
    return parse_formula(text, tuple(mapping.get(o, o) for o in formula.outputs))
