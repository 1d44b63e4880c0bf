"""Parse swizzle formula text (a Python-like subset of Triton) into a validated, immutable Formula.

Only whitelisted syntax passes; anything else is a FormulaError naming the line and the construct.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

from swizzlelab.errors import FormulaError

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
OUTPUT_CANDIDATES_2D = ("pid_m", "pid_n")
OUTPUT_CANDIDATES_1D = ("pid",)
# The only import tolerated, because engineers paste it along with the formula.
ALLOWED_IMPORT = "import triton.language as tl"


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
        ast.For: "loop (for)",
        ast.While: "loop (while)",
        ast.Import: "import",
        ast.ImportFrom: "import",
        ast.FunctionDef: "function definition",
        ast.Lambda: "lambda",
        ast.Subscript: "subscript",
        ast.List: "list",
        ast.Tuple: "tuple",
        ast.Dict: "dict",
        ast.BoolOp: "'and'/'or' (use & and | on comparisons)",
        ast.Div: "true division '/' (use '//')",
        ast.Pow: "power '**'",
        ast.If: "if statement (use `a if cond else b` or tl.where)",
        ast.AugAssign: "augmented assignment (write `x = x + 1`)",
    }
    for kind, label in names.items():
        if isinstance(node, kind):
            return label
    return type(node).__name__


def _fail(node: ast.AST, what: str) -> FormulaError:
    line = getattr(node, "lineno", "?")
    return FormulaError(f"formula line {line}: {what} is not allowed in a swizzle formula")


def _check_tl_call(node: ast.Call) -> None:
    func = node.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "tl"):
        raise _fail(node, f"call of '{ast.unparse(func)}' (only tl.{', tl.'.join(TL_FUNCS)})")
    if func.attr not in TL_FUNCS:
        raise _fail(node, f"tl.{func.attr} (only tl.{', tl.'.join(TL_FUNCS)})")
    expected = TL_FUNCS[func.attr]
    args = list(node.args)
    for keyword in node.keywords:
        if func.attr in ("program_id", "num_programs") and keyword.arg == "axis":
            args.append(keyword.value)
        else:
            raise _fail(node, f"keyword argument '{keyword.arg}' to tl.{func.attr}")
    if len(args) != expected:
        raise FormulaError(
            f"formula line {node.lineno}: tl.{func.attr} takes {expected} argument(s), got {len(args)}"
        )
    if func.attr in ("program_id", "num_programs"):
        axis = args[0]
        if not (isinstance(axis, ast.Constant) and type(axis.value) is int and 0 <= axis.value <= 2):
            raise FormulaError(f"formula line {node.lineno}: tl.{func.attr} needs a constant axis 0, 1 or 2")
    # Normalise `axis=` keywords to positional so later stages see one shape.
    node.args = args
    node.keywords = []


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


def _statements(tree: ast.Module) -> list[Statement]:
    statements: list[Statement] = []
    for stmt in tree.body:
        if _is_allowed_import(stmt):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            continue  # a docstring
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                raise _fail(stmt, "assignment to anything but one plain name")
            target = stmt.targets[0].id
            if target == "tl":
                raise _fail(stmt, "assignment to 'tl'")
            _check_expr(stmt.value)
            statements.append(Statement(target, stmt.value, stmt.lineno))
            continue
        if isinstance(stmt, ast.AnnAssign):
            raise _fail(stmt, "annotated assignment")
        raise _fail(stmt, _construct_name(stmt))
    return statements


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


def default_outputs(assigned: tuple[str, ...]) -> tuple[str, ...] | None:
    """pid_m/pid_n when both are assigned, else pid when assigned, else None."""
    if all(name in assigned for name in OUTPUT_CANDIDATES_2D):
        return OUTPUT_CANDIDATES_2D
    if "pid" in assigned:
        return OUTPUT_CANDIDATES_1D
    return None


def parse_formula(text: str, outputs: tuple[str, ...] | list[str] | None = None) -> Formula:
    """Parse and validate formula text; `outputs` defaults to (pid_m, pid_n) or (pid,) by what it assigns."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("empty formula: write assignments such as `pid = tl.program_id(0)`")
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError as err:
        detail = (err.msg or "invalid syntax").split("\n")[0]
        raise FormulaError(f"formula line {err.lineno}: syntax error: {detail}") from None
    statements = _statements(tree)
    if not statements:
        raise FormulaError("formula has no assignments: write e.g. `pid = tl.program_id(0)`")
    free, assigned = _free_and_assigned(statements)
    if outputs is None:
        outputs = default_outputs(assigned)
        if outputs is None:
            raise FormulaError(
                "formula assigns neither `pid` nor both `pid_m` and `pid_n`: assign the names the kernel uses"
            )
    outputs = tuple(outputs)
    for name in outputs:
        if name not in assigned:
            raise FormulaError(f"formula never assigns output '{name}'")
    launch_rank = max((_max_axis(s.expr) for s in statements), default=-1) + 1
    return Formula(
        source=text,
        statements=tuple(statements),
        outputs=outputs,
        launch_rank=max(launch_rank, 1),
        free_names=free,
        assigned_names=assigned,
    )


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
