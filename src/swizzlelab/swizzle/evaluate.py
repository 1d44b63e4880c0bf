"""Evaluate a Formula for every program of a launch at once, with numpy and Triton's integer semantics.

Runtime values (program ids, runtime args) follow Triton: int32 unless an argument needs int64, C-style
truncating `//` and `%`, overflow reported; constexpr-only arithmetic follows Python, as Triton folds it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from math import prod

import numpy as np

from swizzlelab.errors import FormulaError, UserError
from swizzlelab.fmt import fmt_bytes, grid_text
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.swizzle.lang import Formula, Statement

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Value:
    """An evaluated expression: per-program int64 values (or a 0-d array) and its Triton kind."""

    data: np.ndarray
    is_tensor: bool  # runtime value (C semantics) vs constexpr (Python semantics)
    bits: int = 32  # width of the runtime integer type, for overflow detection


def launch_shape(formula: Formula, grid: tuple[int, ...]) -> tuple[int, ...]:
    """The launch a formula runs under: 1-D with prod(grid) programs unless it reads program_id(1+)."""
    if formula.launch_rank <= 1:
        return (prod(grid),)
    if formula.launch_rank > len(grid):
        raise FormulaError(
            f"formula reads tl.program_id({formula.launch_rank - 1}) but the grid {fmt_grid(grid)} "
            f"has {len(grid)} dimension(s): pass a grid such as --grid 64x64"
        )
    return tuple(grid)


# The grid as people write it ('64x64'); one formatter for the whole package.
fmt_grid = grid_text


def implicit_names(grid: tuple[int, ...]) -> dict[str, int]:
    """Names every kernel site defines for its formula: num_pid_m/num_pid_n on 2-D tile grids."""
    if len(grid) == 2:
        return {"num_pid_m": int(grid[0]), "num_pid_n": int(grid[1])}
    return {}


class _Evaluator:
    """Evaluates statements for the programs [start, stop) of a launch (all of them by default)."""

    def __init__(self, launch: tuple[int, ...], env: dict[str, Value], start: int = 0, stop: int | None = None):
        self.launch = launch
        self.total = prod(launch)
        self.start = start
        self.stop = self.total if stop is None else stop
        self.n_programs = self.stop - self.start
        self.env = env
        self.lineno = 0
        index = np.arange(self.start, self.stop, dtype=np.int64)
        self.program_ids: list[np.ndarray] = []
        stride = 1
        for size in launch:
            self.program_ids.append((index // stride) % size)
            stride *= size

    # -- helpers -----------------------------------------------------------------------------------
    def error(self, what: str) -> FormulaError:
        return FormulaError(f"formula line {self.lineno}: {what}")

    def _first_local(self, mask: np.ndarray) -> int:
        flat = np.broadcast_to(mask, (self.n_programs,)) if mask.ndim == 0 else mask
        return int(np.flatnonzero(flat)[0])

    def _first_program(self, mask: np.ndarray) -> int:
        return self.start + self._first_local(mask)

    def _count(self, mask: np.ndarray) -> str:
        """'N program(s)', counted over the whole launch when the mask is, else over this chunk."""
        if mask.ndim == 0:
            return f"{self.total} program(s)"
        count = int(np.count_nonzero(mask))
        if self.n_programs == self.total:
            return f"{count} program(s)"
        return f"{count} of programs {self.start}..{self.stop - 1}"

    def _checked(self, data: np.ndarray, is_tensor: bool, bits: int) -> Value:
        if is_tensor and bits == 32 and data.size:
            bad = (data < INT32_MIN) | (data > INT32_MAX)
            if bad.any():
                local = self._first_local(bad)
                value = int(np.broadcast_to(data, (self.n_programs,))[local]) if data.ndim else int(data)
                raise self.error(
                    f"int32 overflow: value {value} for program {self.start + local} ({self._count(bad)}); "
                    "Triton computes this in int32: reorder the arithmetic or make the operands int64"
                )
        return Value(data, is_tensor, bits)

    # -- integer semantics -------------------------------------------------------------------------
    def _divmod(self, a: np.ndarray, b: np.ndarray, c_semantics: bool) -> tuple[np.ndarray, np.ndarray]:
        zero = b == 0
        if zero.any():
            raise self.error(
                f"division by zero for {self._count(zero)} (first: program {self._first_program(zero)}); "
                "guard the divisor, e.g. tl.maximum(d, 1)"
            )
        quotient = a // b
        if c_semantics and ((a < 0).any() or (b < 0).any()):
            # C truncates toward zero: floor division is one too low where the exact quotient is negative
            # and not whole.
            quotient = quotient + (((a % b) != 0) & ((a < 0) != (b < 0)))
        return quotient, a - b * quotient

    def binop(self, op: ast.operator, left: Value, right: Value) -> Value:
        a, b = left.data, right.data
        tensor = left.is_tensor or right.is_tensor
        bits = max(left.bits if left.is_tensor else 32, right.bits if right.is_tensor else 32)
        if isinstance(op, ast.Add):
            out = a + b
        elif isinstance(op, ast.Sub):
            out = a - b
        elif isinstance(op, ast.Mult):
            out = a * b
        elif isinstance(op, (ast.FloorDiv, ast.Mod)):
            quotient, remainder = self._divmod(a, b, c_semantics=tensor)
            out = quotient if isinstance(op, ast.FloorDiv) else remainder
        elif isinstance(op, (ast.LShift, ast.RShift)):
            if (b < 0).any() or (b >= 63).any():
                raise self.error("shift count must be between 0 and 62")
            out = a << b if isinstance(op, ast.LShift) else a >> b
        elif isinstance(op, ast.BitAnd):
            out = a & b
        elif isinstance(op, ast.BitOr):
            out = a | b
        elif isinstance(op, ast.BitXor):
            out = a ^ b
        else:  # pragma: no cover - the parser rejects other operators
            raise self.error(f"operator {type(op).__name__}")
        return self._checked(np.asarray(out, dtype=np.int64), tensor, bits)

    def compare(self, op: ast.cmpop, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        table = {
            ast.Eq: np.equal,
            ast.NotEq: np.not_equal,
            ast.Lt: np.less,
            ast.LtE: np.less_equal,
            ast.Gt: np.greater,
            ast.GtE: np.greater_equal,
        }
        return table[type(op)](a, b)

    # -- expression walk ---------------------------------------------------------------------------
    def eval(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            return Value(np.asarray(int(node.value), dtype=np.int64), False)
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise self.error(
                    f"name '{node.id}' is not defined: pass it with --arg {node.id}=VALUE "
                    f"(runtime argument) or --const {node.id}=VALUE (constexpr), or assign it first"
                )
            return self.env[node.id]
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.eval(node.left), self.eval(node.right))
        if isinstance(node, ast.UnaryOp):
            operand = self.eval(node.operand)
            data = -operand.data if isinstance(node.op, ast.USub) else operand.data
            return self._checked(np.asarray(data, dtype=np.int64), operand.is_tensor, operand.bits)
        if isinstance(node, ast.Compare):
            left = self.eval(node.left)
            result: np.ndarray | None = None
            tensor = left.is_tensor
            for op, comparator in zip(node.ops, node.comparators):
                right = self.eval(comparator)
                tensor = tensor or right.is_tensor
                part = self.compare(op, left.data, right.data)
                result = part if result is None else (result & part)
                left = right
            return Value(np.asarray(result, dtype=np.int64), tensor)
        if isinstance(node, ast.IfExp):
            return self.where(self.eval(node.test), self.eval(node.body), self.eval(node.orelse))
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.error(f"unsupported expression {type(node).__name__}")  # pragma: no cover

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        tensor = cond.is_tensor or a.is_tensor or b.is_tensor
        bits = max(v.bits for v in (a, b) if v.is_tensor) if (a.is_tensor or b.is_tensor) else 32
        return Value(np.where(cond.data != 0, a.data, b.data).astype(np.int64), tensor, bits)

    def call(self, node: ast.Call) -> Value:
        name = node.func.attr  # type: ignore[attr-defined]
        if name in ("program_id", "num_programs"):
            axis = int(node.args[0].value)  # type: ignore[attr-defined]
            if axis >= len(self.launch):
                raise self.error(f"tl.{name}({axis}) on a {len(self.launch)}-D launch")
            if name == "program_id":
                return Value(self.program_ids[axis], True)
            return Value(np.asarray(self.launch[axis], dtype=np.int64), True)
        args = [self.eval(arg) for arg in node.args]
        if name == "cdiv":
            a, b = args
            one = Value(np.asarray(1, dtype=np.int64), False)
            return self.binop(ast.FloorDiv(), self.binop(ast.Sub(), self.binop(ast.Add(), a, b), one), b)
        if name in ("minimum", "maximum"):
            a, b = args
            func = np.minimum if name == "minimum" else np.maximum
            tensor = a.is_tensor or b.is_tensor
            return Value(np.asarray(func(a.data, b.data), dtype=np.int64), tensor, max(a.bits, b.bits))
        if name == "where":
            return self.where(*args)
        raise self.error(f"tl.{name}")  # pragma: no cover


def grid_definition(stmt: Statement, grid: tuple[int, ...], env: Mapping[str, Value]) -> str | None:
    """Whether `stmt` (re)defines a grid name such as num_pid_m from names not given: then the grid's value
    stands, and the returned note says so (the Triton tutorial computes num_pid_m inside its remap block)."""
    implicit = implicit_names(grid)
    if stmt.target not in implicit:
        return None
    missing = sorted({n.id for n in ast.walk(stmt.expr) if isinstance(n, ast.Name)} - set(env) - {"tl"})
    if not missing:
        return None
    return (
        f"line {stmt.lineno}: {stmt.target} = {ast.unparse(stmt.expr)} reads {', '.join(missing)} (not given): "
        f"{stmt.target} = {implicit[stmt.target]} taken from the grid"
    )


def run_statements(evaluator: _Evaluator, formula: Formula, grid: tuple[int, ...]) -> list[str]:
    """Evaluate every statement into the evaluator's names; returns notes on grid names taken from the grid.

    A statement that redefines num_pid_m/num_pid_n must agree with the grid; one that reads names nobody
    gave keeps the grid's value (the grid is the tile grid those lines compute)."""
    notes: list[str] = []
    implicit = implicit_names(grid)
    for stmt in formula.statements:
        evaluator.lineno = stmt.lineno
        note = grid_definition(stmt, grid, evaluator.env)
        if note is not None:
            notes.append(note)
            continue
        value = evaluator.eval(stmt.expr)
        if stmt.target in implicit:
            expected = implicit[stmt.target]
            wrong = np.asarray(value.data) != expected
            if wrong.any():
                got = int(np.broadcast_to(value.data, (evaluator.n_programs,))[evaluator._first_local(wrong)])
                axis = "rows" if stmt.target == "num_pid_m" else "columns"
                raise evaluator.error(
                    f"{stmt.target} = {ast.unparse(stmt.expr)} is {got} but the grid "
                    f"{fmt_grid(grid)} has {expected} tile {axis}: give the grid the kernel launches "
                    f"(--grid) or the sizes that produce it (--arg/--const)"
                )
        evaluator.env[stmt.target] = value
    return notes


def build_env(
    grid: tuple[int, ...],
    args: Mapping[str, int] | None,
    consts: Mapping[str, int] | None,
) -> dict[str, Value]:
    """Initial names: implicit grid names and runtime args as tensors, constexprs as Python ints."""
    env: dict[str, Value] = {}
    for name, value in {**implicit_names(grid), **dict(args or {})}.items():
        bits = 32 if INT32_MIN <= int(value) <= INT32_MAX else 64
        env[name] = Value(np.asarray(int(value), dtype=np.int64), True, bits)
    for name, value in dict(consts or {}).items():
        env[name] = Value(np.asarray(int(value), dtype=np.int64), False)
    return env


# Triton program ids and launch sizes are int32; CUDA also caps grid axes 1 and 2 at 65535 blocks.
MAX_PROGRAMS = INT32_MAX
MAX_AXIS_12 = 65535
# Working set of one chunk: int64 arrays of a chunk's length, one per live name plus temporaries.
CHUNK_BUDGET_BYTES = 256 * 2**20
MAX_CHUNK = 1 << 20
MIN_CHUNK = 1 << 12


def chunk_size(formula: Formula) -> int:
    """Programs per chunk so that one chunk's arrays stay near CHUNK_BUDGET_BYTES."""
    arrays = len(formula.statements) + len(formula.outputs) + 8
    return int(max(MIN_CHUNK, min(MAX_CHUNK, CHUNK_BUDGET_BYTES // (8 * arrays))))


def chunk_bytes(formula: Formula) -> int:
    return chunk_size(formula) * 8 * (len(formula.statements) + len(formula.outputs) + 8)


def check_launch(formula: Formula, grid: tuple[int, ...]) -> tuple[int, ...]:
    """The launch of `formula` on `grid`, refused up front when Triton/CUDA could not launch it."""
    grid = tuple(int(g) for g in grid)
    if not grid or any(g < 1 for g in grid):
        raise FormulaError(f"grid {grid} must have 1 or 2 positive sizes, e.g. --grid 4096 or --grid 64x64")
    launch = launch_shape(formula, grid)
    n_programs = prod(launch)
    if n_programs > MAX_PROGRAMS or prod(grid) > MAX_PROGRAMS:
        raise FormulaError(
            f"grid {fmt_grid(grid)} has {prod(grid):,} tiles: Triton program and tile ids are int32, so a launch "
            f"holds at most {MAX_PROGRAMS:,} programs; give the grid the kernel launches"
        )
    if len(launch) > 1 and any(size > MAX_AXIS_12 for size in launch[1:]):
        raise FormulaError(
            f"grid {fmt_grid(grid)} launches {max(launch[1:]):,} programs on axis {1 + launch[1:].index(max(launch[1:]))}: "
            f"CUDA allows at most {MAX_AXIS_12:,} on axes 1 and 2; give the grid the kernel launches"
        )
    return launch


def require_memory(needed: int, what: str) -> None:
    """Refuse up front (UserError) when `needed` bytes exceed the memory available now."""
    available = available_memory_bytes()
    if needed > available:
        raise UserError(
            f"{what} needs about {fmt_bytes(needed)} of memory but {fmt_bytes(available)} is available: "
            "use a smaller grid or free memory"
        )


def evaluate_chunks(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
    chunk: int | None = None,
    notes: list[str] | None = None,
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(first launch index, outputs of programs first..first+len-1) chunk by chunk, in launch order.

    Every value is per program, so chunks give exactly the values of one whole-launch evaluation; memory
    stays at one chunk's arrays. Grid-name notes (see run_statements) are appended to `notes`."""
    grid = tuple(int(g) for g in grid)
    launch = check_launch(formula, grid)
    total = prod(launch)
    step = chunk or chunk_size(formula)
    for start in range(0, total, step):
        stop = min(total, start + step)
        evaluator = _Evaluator(launch, build_env(grid, args, consts), start, stop)
        chunk_notes = run_statements(evaluator, formula, grid)
        if notes is not None and start == 0:
            notes.extend(chunk_notes)
        yield start, {
            name: np.broadcast_to(evaluator.env[name].data, (evaluator.n_programs,)).astype(np.int64, copy=True)
            for name in formula.outputs
        }


def evaluate(
    formula: Formula,
    grid: tuple[int, ...],
    args: Mapping[str, int] | None = None,
    consts: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Per-program output values, indexed by launch index (axis 0 fastest), as int64 arrays.

    Refused up front (UserError naming the bytes) when the output arrays would not fit in memory."""
    grid = tuple(int(g) for g in grid)
    launch = check_launch(formula, grid)
    total = prod(launch)
    require_memory(
        total * 8 * len(formula.outputs) + chunk_bytes(formula),
        f"evaluating the formula on grid {fmt_grid(grid)} ({total:,} programs)",
    )
    if total <= chunk_size(formula):
        evaluator = _Evaluator(launch, build_env(grid, args, consts))
        run_statements(evaluator, formula, grid)
        return {
            name: np.broadcast_to(evaluator.env[name].data, (total,)).astype(np.int64, copy=True)
            for name in formula.outputs
        }
    out = {name: np.empty(total, dtype=np.int64) for name in formula.outputs}
    for start, values in evaluate_chunks(formula, grid, args, consts):
        for name, array in values.items():
            out[name][start : start + array.size] = array
    return out
