"""Record a Triton kernel's per-program memory accesses by hooking the CPU interpreter's builder.

Loads, stores and atomics become line accesses per tensor argument, grouped into loop steps per program.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import sys
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.runtime import ensure_triton_backend
from swizzlelab.trace.access_trace import AccessTrace, TensorInfo

LINE_BYTES = 128
SECTOR_BYTES = 32


# (kernel name, launches of that kernel recorded before this one, launch grid) -> the launch indices to
# interpret, or None for all of them; the other programs are skipped (their loop iterations cost nothing)
ProgramChoice = Callable[[str, int, tuple[int, int, int]], Collection[int] | None]


@dataclass(frozen=True)
class _ArgTensor:
    name: str
    ptr: int
    n_bytes: int
    elem_bytes: int
    is_integer: bool
    base_line: int
    n_lines: int
    shape: tuple[int, ...] = ()
    dtype: str = ""


@dataclass
class _Op:
    lines: np.ndarray  # int64, ascending, distinct
    masks: np.ndarray  # uint8
    is_write: bool
    # with AccessRecorder(describe=True): the op as bytes, tensor-relative, so that trace.derive can fit it;
    # pattern -1 means not describable that way (lanes in several tensors), None an op with every lane masked
    tensor: int = -1
    lo: int = 0  # lowest byte offset touched in that tensor
    pattern: int | None = None  # index in AccessRecorder.pattern_list: the lanes' byte offsets minus `lo`


@dataclass
class _Program:
    steps: list[list[_Op]] = field(default_factory=list)
    seen_sites: set[tuple] = field(default_factory=set)

    def add(self, site: tuple, op: _Op) -> None:
        # a memory op from a site already seen in this step starts the next loop step
        if not self.steps or site in self.seen_sites:
            self.steps.append([])
            self.seen_sites = set()
        self.seen_sites.add(site)
        self.steps[-1].append(op)


@dataclass
class LaunchRecord:
    """What one kernel launch did: its tensors (in argument order) and each program's steps."""

    kernel_name: str
    launch_grid: tuple[int, int, int]
    tensors: list[_ArgTensor]
    programs: dict[int, _Program]  # by launch index; programs a ProgramChoice skipped are absent
    chosen: Collection[int] | None = None  # what the ProgramChoice said for this launch (None: every program)
    # the 64-bit integer arguments whose values pointed the kernel at tensors that are not its arguments
    address_tables: list[str] = field(default_factory=list)

    @property
    def n_programs(self) -> int:
        return int(np.prod(self.launch_grid))

    def program_list(self) -> list[_Program]:
        """Every program of the launch in launch order (skipped ones empty)."""
        return [self.programs.get(i) or _Program() for i in range(self.n_programs)]

    def tensor_infos(self) -> list[TensorInfo]:
        return [TensorInfo(t.name, t.base_line, t.n_lines, t.elem_bytes) for t in self.tensors]

    def trace_meta(self, meta: dict[str, str] | None = None) -> dict[str, str]:
        return {"source": "traced", "kernel": self.kernel_name, **(meta or {})}

    def to_trace(self, grid: tuple[int, ...], meta: dict[str, str] | None = None) -> AccessTrace:
        """Program launch index i becomes tile i of `grid` (trace the kernel in its identity order)."""
        grid = tuple(int(g) for g in grid)
        n_programs = self.n_programs
        if not grid or int(np.prod(grid)) != n_programs:
            raise UserError(
                f"kernel {self.kernel_name} ran {n_programs} programs (launch grid {self.launch_grid}) but tile "
                f"grid {grid} has {int(np.prod(grid)) if grid else 0} tiles: pass the task's tile_grid(**sizes)"
            )
        step_sizes: list[int] = []
        steps_per_tile = np.zeros(n_programs, dtype=np.int64)
        ops: list[_Op] = []
        for tile, program in enumerate(self.program_list()):
            kept = [step for step in program.steps if sum(op.lines.size for op in step)]
            steps_per_tile[tile] = len(kept)
            for step in kept:
                step_sizes.append(sum(op.lines.size for op in step))
                ops.extend(step)
        lines = np.concatenate([op.lines for op in ops]) if ops else np.zeros(0, np.int64)
        masks = np.concatenate([op.masks for op in ops]) if ops else np.zeros(0, np.uint8)
        writes = (
            np.concatenate([np.full(op.lines.size, op.is_write) for op in ops]) if ops else np.zeros(0, np.bool_)
        )
        step_ptr = np.zeros(len(step_sizes) + 1, dtype=np.int64)
        np.cumsum(step_sizes, out=step_ptr[1:])
        tile_step_ptr = np.zeros(n_programs + 1, dtype=np.int64)
        np.cumsum(steps_per_tile, out=tile_step_ptr[1:])
        full_meta = self.trace_meta(meta)
        return AccessTrace(
            lines.astype(np.int64), masks.astype(np.uint8), writes.astype(np.bool_), step_ptr, tile_step_ptr,
            self.tensor_infos(), grid, LINE_BYTES, SECTOR_BYTES, full_meta,
        ).validate()


class AccessRecorder:
    """Collects LaunchRecords while `record_accesses()` is active."""

    def __init__(self, skip_arithmetic: bool, real_tensors: frozenset[str], choose: ProgramChoice | None = None,
                 describe: bool = False) -> None:
        self.skip_arithmetic = skip_arithmetic
        self.real_tensors = real_tensors
        self.choose = choose
        self.describe = describe
        self.launches: list[LaunchRecord] = []
        # the current launch's 64-bit integer tensor arguments: tables of addresses a kernel may load its
        # pointers from (tutorial 08's grouped GEMM); read only when an access lies outside every known tensor
        self._address_tables: list[tuple[str, Any]] = []
        # describe mode: each distinct lane pattern (element bytes, byte offsets from the op's lowest byte) once
        self.patterns: dict[tuple[int, bytes], int] = {}
        self.pattern_list: list[tuple[int, np.ndarray]] = []
        self.skipping = False  # the current program is one `choose` left out
        self.integer_atomics: set[str] = set()  # integer tensors atomics touched: programs may talk through them
        self._program: _Program | None = None
        import triton

        # frames inside Triton and inside this package are not part of a memory op's source site
        self._skip_dirs = (os.path.dirname(os.path.abspath(triton.__file__)), os.path.dirname(os.path.abspath(__file__)))

    # ---- called from the hooks -------------------------------------------------------------------------
    def begin_launch(self, kernel_name: str, arg_names: list[str], args: list[Any], kwargs: dict[str, Any]) -> None:
        by_name = {**dict(zip(arg_names, args)), **kwargs}
        # signature order, whether an argument came by position or by keyword
        named = [(name, by_name[name]) for name in arg_names if name in by_name]
        self.launches.append(LaunchRecord(kernel_name, (0, 0, 0), _tensor_args(named), {}))
        self._address_tables = [(n, v) for n, v in named if _is_address_table(v)]
        self._program = None
        self.skipping = False

    def begin_program(self, grid_dim: tuple[int, int, int], idx: tuple[int, int, int]) -> None:
        launch = self.launches[-1]
        if launch.launch_grid == (0, 0, 0):
            launch.launch_grid = tuple(int(g) for g in grid_dim)
            if self.choose is not None:
                before = sum(1 for r in self.launches[:-1] if r.kernel_name == launch.kernel_name)
                chosen = self.choose(launch.kernel_name, before, launch.launch_grid)
                launch.chosen = None if chosen is None else frozenset(int(i) for i in chosen)
        x, y, z = idx
        index = x + grid_dim[0] * (y + grid_dim[1] * z)
        self.skipping = launch.chosen is not None and index not in launch.chosen
        self._program = None if self.skipping else launch.programs.setdefault(index, _Program())

    def record(self, ptrs: Any, mask: Any, is_write: bool) -> _ArgTensor | None:
        """Record one memory op; returns the tensor it touched (None when every lane was masked off)."""
        if self._program is None or not self.launches:
            return None
        launch = self.launches[-1]
        addr = np.asarray(ptrs.data)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape) if mask is not None else None
        addr = (addr[on] if on is not None else addr.ravel()).astype(np.int64)
        elem_bytes = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        site = _call_site(self._skip_dirs)
        if addr.size == 0:
            self._program.add(site, _Op(np.zeros(0, np.int64), np.zeros(0, np.uint8), is_write))
            return None
        while True:
            try:
                if self.describe:
                    op, touched = self._described(addr, elem_bytes, is_write, launch)
                else:
                    lines, masks, touched = _lines_of(addr, elem_bytes, launch.tensors, launch.kernel_name)
                    op = _Op(lines, masks, is_write)
                break
            except _OutsideTensors as miss:
                if not self._adopt_pointed_at(launch, miss.address):
                    raise
        self._program.add(site, op)
        return touched

    def _adopt_pointed_at(self, launch: LaunchRecord, address: int) -> bool:
        """Add to the launch's tensors those whose addresses its address tables hold (in table order), when one
        of them holds `address`: pointers the kernel loaded from data, resolved to the tensors they point at.
        They are looked for among the tensors the launching code holds (its frames' locals, and lists, tuples
        and dicts of them), named as it names them (`group_A[1]`)."""
        if not self._address_tables:
            return False
        held = [(name, t) for name, t in _tensors_held(self._skip_dirs)
                if not any(k.ptr == t.data_ptr() for k in launch.tensors)]
        if not held:
            return False
        starts = np.array([t.data_ptr() for _, t in held], dtype=np.int64)
        ends = starts + np.array([_extent_bytes(t) for _, t in held], dtype=np.int64)
        by_start = np.argsort(starts, kind="stable")
        chosen: list[int] = []
        tables: list[str] = []
        for table_name, table in self._address_tables:
            values = table.detach().reshape(-1).numpy().astype(np.int64, copy=False)
            # the held tensor starting last at or before each value, when the value lies inside it
            below = np.searchsorted(starts[by_start], values, side="right") - 1
            candidate = by_start[np.maximum(below, 0)]
            inside = (below >= 0) & (values < ends[candidate])
            hits = candidate[inside]
            if hits.size:
                tables.append(table_name)
                _, first = np.unique(hits, return_index=True)
                chosen += [int(h) for h in hits[np.sort(first)] if int(h) not in chosen]
        if not any(starts[i] <= address < ends[i] for i in chosen):
            return False
        launch.address_tables = tables
        next_line = launch.tensors[-1].base_line + launch.tensors[-1].n_lines if launch.tensors else 0
        launch.tensors.extend(_tensor_args([held[i] for i in chosen], next_line))
        return True

    def _described(self, addr: np.ndarray, elem_bytes: int, is_write: bool,
                   launch: LaunchRecord) -> tuple[_Op, _ArgTensor]:
        """The op as (tensor, lowest byte, lane pattern); its lines are left to whoever lays the trace out."""
        low, high = int(addr.min()), int(addr.max())
        for index, tensor in enumerate(launch.tensors):
            if high < tensor.ptr or low >= tensor.ptr + tensor.n_bytes:
                continue
            # _lines_of gives each lane the first tensor that holds it: describe only ops one tensor holds whole
            if tensor.ptr <= low and high < tensor.ptr + tensor.n_bytes:
                rel = addr - low
                key = (elem_bytes, rel.tobytes())
                pattern = self.patterns.get(key)
                if pattern is None:
                    pattern = self.patterns[key] = len(self.pattern_list)
                    self.pattern_list.append((elem_bytes, rel))
                empty = np.zeros(0, np.int64)
                return _Op(empty, empty.astype(np.uint8), is_write, index, low - tensor.ptr, pattern), tensor
            break
        # lanes in several tensors (or outside all: _lines_of names the address)
        lines, masks, touched = _lines_of(addr, elem_bytes, launch.tensors, launch.kernel_name)
        return _Op(lines, masks, is_write, -1, 0, -1), touched

    def note_atomic(self, tensor: _ArgTensor | None) -> None:
        if tensor is not None and tensor.is_integer:
            self.integer_atomics.add(tensor.name)

    def keep_real_load(self, tensor: _ArgTensor | None) -> bool:
        if not self.skip_arithmetic or tensor is None:
            return True
        return tensor.is_integer or tensor.name in self.real_tensors

    # ---- results -----------------------------------------------------------------------------------
    def launch(self, kernel_name: str | None = None, n_programs: int | None = None) -> LaunchRecord:
        """The single recorded launch of kernel `kernel_name` (any name if None); among several, the single one
        that ran `n_programs` programs."""
        # A kernel with a swizzle spliced in is named `<name>__swz_<id>` (swizzle.apply_swizzle).
        chosen = [r for r in self.launches if kernel_name is None or r.kernel_name == kernel_name
                  or r.kernel_name.startswith(kernel_name + "__swz_")]
        if len(chosen) > 1 and n_programs is not None:
            sized = [r for r in chosen if r.n_programs == n_programs]
            chosen = sized if len(sized) == 1 else chosen
        if len(chosen) != 1:
            names = ", ".join(r.kernel_name for r in self.launches) or "none"
            raise UserError(
                f"expected one launch{' of ' + kernel_name if kernel_name else ''} but recorded {len(chosen)} "
                f"(launches: {names}): name the kernel to trace"
            )
        return chosen[0]


def _is_address_table(value: Any) -> bool:
    """A CPU tensor of 64-bit integers (what `x.data_ptr()` values become in a device array of pointers)."""
    import torch

    return isinstance(value, torch.Tensor) and value.dtype in (torch.int64, torch.uint64) and value.device.type == "cpu"


def _extent_bytes(tensor: Any) -> int:
    """Bytes from a tensor's first element to the end of its last (strides included)."""
    return (sum((s - 1) * st for s, st in zip(tensor.shape, tensor.stride())) + 1) * int(tensor.element_size())


def _tensors_held(skip_dirs: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Non-empty torch tensors the running code outside Triton and swizzlelab holds, innermost frame first: its
    frames' locals and the members of lists, tuples and dicts among them; each tensor once, by its first name."""
    import torch

    own = (*skip_dirs, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def take(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.numel() and id(value) not in seen:
            seen.add(id(value))
            found.append((name, value))

    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(own):
            for name, value in list(frame.f_locals.items()):
                take(name, value)
                if isinstance(value, (list, tuple)):
                    for i, item in enumerate(value):
                        take(f"{name}[{i}]", item)
                elif isinstance(value, dict):
                    for key, item in value.items():
                        take(f"{name}[{key!r}]", item)
        frame = frame.f_back
    return found


def _tensor_args(named: list[tuple[str, Any]], first_line: int = 0) -> list[_ArgTensor]:
    """Tensor arguments (TensorDescriptor bases and tuple members included) with line ranges in argument order,
    the first starting at trace line `first_line`."""
    flat: list[tuple[str, Any]] = []
    for name, value in named:
        if isinstance(value, tuple):
            flat.extend((f"{name}[{i}]", v) for i, v in enumerate(value))
        elif hasattr(value, "base") and hasattr(value, "block_shape") and hasattr(value.base, "data_ptr"):
            flat.append((name, value.base))
        else:
            flat.append((name, value))
    out: list[_ArgTensor] = []
    next_line = first_line
    for name, value in flat:
        tensor = getattr(value, "base", value) if type(value).__name__ == "TensorWrapper" else value
        if not hasattr(tensor, "data_ptr") or not hasattr(tensor, "element_size") or tensor.numel() == 0:
            continue
        elem_bytes = int(tensor.element_size())
        extent = _extent_bytes(tensor)
        n_lines = -(-extent // LINE_BYTES)
        is_integer = not (tensor.dtype.is_floating_point or tensor.dtype.is_complex)
        out.append(_ArgTensor(name, int(tensor.data_ptr()), int(extent), elem_bytes, is_integer, next_line, n_lines,
                              tuple(int(d) for d in tensor.shape), str(tensor.dtype).replace("torch.", "")))
        next_line += n_lines
    return out


def _lines_of(
    addr: np.ndarray, elem_bytes: int, tensors: list[_ArgTensor], kernel_name: str
) -> tuple[np.ndarray, np.ndarray, _ArgTensor]:
    """Distinct trace lines (ascending) with OR-ed sector masks of byte addresses; the first tensor touched."""
    line = np.full(addr.shape, -1, dtype=np.int64)
    first_byte = np.zeros(addr.shape, dtype=np.int64)
    touched: _ArgTensor | None = None
    for tensor in tensors:
        inside = (line < 0) & (addr >= tensor.ptr) & (addr < tensor.ptr + tensor.n_bytes)
        if inside.any():
            offset = addr[inside] - tensor.ptr
            line[inside] = tensor.base_line + offset // LINE_BYTES
            first_byte[inside] = offset % LINE_BYTES
            touched = touched or tensor
    if np.any(line < 0):
        bad = int(addr[np.argmax(line < 0)])
        raise _OutsideTensors(
            f"kernel {kernel_name} accessed address {bad:#x} outside every tensor argument (and every tensor its "
            "address tables point into): check its masks, or pass the buffer it reads as an argument", bad)
    assert touched is not None
    lines, masks = line_masks(line, first_byte, elem_bytes)
    return lines, masks, touched


class _OutsideTensors(UserError):
    """An access outside every known tensor (`address`: the first such byte)."""

    def __init__(self, message: str, address: int) -> None:
        super().__init__(message)
        self.address = address


def line_masks(line: np.ndarray, first_byte: np.ndarray, elem_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct lines (ascending) and OR-ed sector masks of elements at (line, first byte within the line)."""
    last_byte = np.minimum(first_byte + elem_bytes - 1, LINE_BYTES - 1)
    mask = (1 << (first_byte // SECTOR_BYTES)) | (1 << (last_byte // SECTOR_BYTES))
    order = np.argsort(line, kind="stable")
    line_sorted = line[order]
    starts = np.flatnonzero(np.r_[True, line_sorted[1:] != line_sorted[:-1]])
    masks = np.bitwise_or.reduceat(mask[order].astype(np.uint8), starts)
    return line_sorted[starts], masks


def _call_site(skip_dirs: tuple[str, ...]) -> tuple:
    """The kernel source lines (outermost first) that led to this memory op, Triton's and our frames excluded."""
    triton_dir = skip_dirs[0]
    frame = sys._getframe(2)
    site: list[tuple[str, int, int]] = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if frame.f_code.co_name == "__call__" and filename.startswith(triton_dir) and "self" in frame.f_locals and \
                type(frame.f_locals["self"]).__name__ == "GridExecutor":
            break
        if not filename.startswith(skip_dirs):
            site.append((filename, frame.f_lineno, frame.f_lasti))  # f_lasti: two ops on one line differ
        frame = frame.f_back
    return tuple(reversed(site))


class _ChosenOnly:
    """Stands in for a launch's kernel function in the interpreter's grid loop: runs the programs the
    recorder's ProgramChoice chose, returns at once for the others. The loop passes everything by keyword,
    reads the signature and patches triton.language in the function's globals: those are the real one's."""

    def __init__(self, fn: Callable[..., Any], recorder: AccessRecorder) -> None:
        self.fn = fn
        self.recorder = recorder
        self.__signature__ = inspect.signature(fn)
        self.__globals__ = fn.__globals__
        self.__name__ = fn.__name__

    def __call__(self, **kwargs: Any) -> Any:
        if self.recorder.skipping:
            return None
        return self.fn(**kwargs)


@contextlib.contextmanager
def record_accesses(skip_arithmetic: bool = True, real_tensors: frozenset[str] | set[str] = frozenset(), *,
                    choose: ProgramChoice | None = None, describe: bool = False) -> Iterator[AccessRecorder]:
    """Within this block every interpreted kernel launch is recorded; the interpreter is restored after.

    With `skip_arithmetic`, float loads return zeros without reading memory and `dot` returns its accumulator,
    so that tracing costs about the address arithmetic only; loads of integer tensors, and of tensors named
    in `real_tensors`, stay real because addresses (spmv's column indices, row pointers) depend on them.
    `choose` picks which programs of each launch run at all (trace.derive interprets a few at the real size);
    with `describe`, ops are kept as byte patterns (_Op.tensor/lo/pattern) instead of lines.
    """
    ensure_triton_backend()
    try:
        from triton.runtime import interpreter as interp
    except ImportError as err:  # pragma: no cover - triton is a dependency
        raise UserError(f"cannot import the Triton interpreter ({err}): install triton 3.6") from None
    recorder = AccessRecorder(skip_arithmetic, frozenset(real_tensors), choose, describe)
    builder_cls = interp.InterpreterBuilder
    executor_cls = interp.GridExecutor
    originals = {
        (builder_cls, "set_grid_idx"): builder_cls.set_grid_idx,
        (builder_cls, "create_masked_load"): builder_cls.create_masked_load,
        (builder_cls, "create_masked_store"): builder_cls.create_masked_store,
        (builder_cls, "create_atomic_rmw"): builder_cls.create_atomic_rmw,
        (builder_cls, "create_atomic_cas"): builder_cls.create_atomic_cas,
        (builder_cls, "create_dot"): builder_cls.create_dot,
        (executor_cls, "_init_args_hst"): executor_cls._init_args_hst,
    }
    orig = {name: fn for (_, name), fn in originals.items()}

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig["_init_args_hst"](self, args_dev, kwargs)
        recorder.begin_launch(getattr(self.fn, "__name__", "kernel"), list(self.arg_names), list(args_hst), dict(kwargs_hst))
        if choose is not None and not isinstance(self.fn, _ChosenOnly):
            self.fn = _ChosenOnly(self.fn, recorder)  # this executor serves this one launch
        return args_hst, kwargs_hst

    def set_grid_idx(self, x, y, z):
        orig["set_grid_idx"](self, x, y, z)
        recorder.begin_program(self.grid_dim, (x, y, z))

    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        tensor = recorder.record(ptrs, mask, is_write=False)
        if recorder.keep_real_load(tensor):
            return orig["create_masked_load"](self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)
        dtype_tt = ptrs.get_element_ty()
        return interp.TensorHandle(np.zeros(np.shape(ptrs.data), dtype=interp._get_np_dtype(dtype_tt)), dtype_tt)

    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):
        recorder.record(ptrs, mask, is_write=True)
        return orig["create_masked_store"](self, ptrs, value, mask, cache_modifier, eviction_policy)

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        recorder.note_atomic(recorder.record(ptr, mask, is_write=True))
        return orig["create_atomic_rmw"](self, rmw_op, ptr, val, mask, sem, scope)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        recorder.note_atomic(recorder.record(ptr, None, is_write=True))
        return orig["create_atomic_cas"](self, ptr, cmp, val, sem, scope)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if recorder.skip_arithmetic:
            return interp.TensorHandle(np.array(d.data, copy=True), d.dtype.scalar)
        return orig["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)

    hooks = {
        "_init_args_hst": init_args_hst,
        "set_grid_idx": set_grid_idx,
        "create_masked_load": create_masked_load,
        "create_masked_store": create_masked_store,
        "create_atomic_rmw": create_atomic_rmw,
        "create_atomic_cas": create_atomic_cas,
        "create_dot": create_dot,
    }
    # zeroed operands make softmax-style code divide 0 by 0; that is expected, so keep numpy quiet
    quiet = np.errstate(all="ignore") if skip_arithmetic else contextlib.nullcontext()
    # With sanitize_overflow the interpreter redoes every int32 add/sub/mul in int64 and builds a range check,
    # which it then drops (device_assert is a no-op without debug=True): half of the time of a matmul's pointer
    # arithmetic (69 -> 31 CPU s for tutorial 09's derived trace at 8192^3). Off while recording: same results.
    builder = interp.interpreter_builder
    options = builder.options
    try:
        for (cls, name) in originals:
            setattr(cls, name, hooks[name])
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
        with quiet:
            yield recorder
    finally:
        builder.options = options
        for (cls, name), fn in originals.items():
            setattr(cls, name, fn)


def _require_interpreter(kernel: Any) -> None:
    ensure_triton_backend()
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(kernel, InterpretedFunction):
        raise UserError(
            f"{getattr(kernel, '__name__', kernel)!s} is not an interpreted Triton kernel: set TRITON_INTERPRET=1 "
            "(swizzlelab.runtime.ensure_triton_backend()) before the kernel's module is imported"
        )


def run_guarded(launch: Callable[[], Any], what: str) -> None:
    """Run a launch under the interpreter, turning the interpreter's own errors into a one-line UserError."""
    from triton.runtime.interpreter import InterpreterError

    try:
        launch()
    except UserError:
        raise
    except InterpreterError as err:
        cause = err.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        raise UserError(f"{what} failed under the Triton interpreter: {_one_line(cause or err)}") from None
    except Exception as err:
        raise UserError(f"{what} failed under the Triton interpreter: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


def trace_kernel(
    kernel: Any,
    grid: tuple[int, ...],
    args: tuple | list,
    kwargs: dict[str, Any] | None = None,
    *,
    launch_grid: tuple[int, ...] | None = None,
    skip_arithmetic: bool = True,
    real_tensors: frozenset[str] | set[str] = frozenset(),
    meta: dict[str, str] | None = None,
) -> AccessTrace:
    """Run `kernel[launch_grid](*args, **kwargs)` under the interpreter and return its AccessTrace on `grid`.

    `launch_grid` defaults to the 1-D launch `(prod(grid),)`; program launch index i is recorded as tile i,
    so launch the kernel in its identity order. Tensor arguments become the trace's tensors, named by the
    kernel's parameter names, in argument order.
    """
    _require_interpreter(kernel)
    grid = tuple(int(g) for g in grid)
    if not grid or any(g < 1 for g in grid):
        raise UserError(f"tile grid {grid} must be a non-empty tuple of positive sizes")
    launch_grid = tuple(int(g) for g in (launch_grid or (int(np.prod(grid)),)))
    if int(np.prod(launch_grid)) != int(np.prod(grid)):
        raise UserError(
            f"launch grid {launch_grid} runs {int(np.prod(launch_grid))} programs but tile grid {grid} has "
            f"{int(np.prod(grid))} tiles: launch one program per tile"
        )
    name = getattr(kernel, "__name__", "kernel")
    with record_accesses(skip_arithmetic, real_tensors) as recorder:
        run_guarded(lambda: kernel[launch_grid](*args, **(kwargs or {})), f"kernel {name}")
    return recorder.launch(name).to_trace(grid, meta)


def trace_call(
    launch: Callable[[], Any],
    grid: tuple[int, ...],
    *,
    kernel_name: str | None = None,
    skip_arithmetic: bool = True,
    real_tensors: frozenset[str] | set[str] = frozenset(),
    meta: dict[str, str] | None = None,
) -> AccessTrace:
    """Trace the kernel launched by `launch()` (e.g. a task's custom_kernel with the identity order).

    When `launch()` starts several kernels, the one named `kernel_name` is kept, or else the single one whose
    program count equals the tile count of `grid`.
    """
    with record_accesses(skip_arithmetic, real_tensors) as recorder:
        run_guarded(launch, kernel_name or "kernel launch")
    n_programs = int(np.prod(grid)) if grid else None
    return recorder.launch(kernel_name, n_programs).to_trace(grid, meta)
