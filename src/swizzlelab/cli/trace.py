"""CLI sub-command of swizzlelab.trace: `swizzlelab trace TASK` builds (or records) a task's access trace.

Library packages never import this module; it sits on top of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from swizzlelab.errors import UserError


def parse_case_spec(spec: str) -> tuple[str, int]:
    """'test:N' / 'bench:N' (also 'tests:N', 'benchmarks:N') -> (case kind, index)."""
    kind, _, index = spec.partition(":")
    kinds = {"test": "tests", "tests": "tests", "bench": "benchmarks", "benchmark": "benchmarks", "benchmarks": "benchmarks"}
    if kind not in kinds or not index.isdigit():
        raise UserError(f"case {spec!r} not understood: write test:N or bench:N (N counts from 0)")
    return kinds[kind], int(index)


def pick_case(task: Any, spec: str) -> dict[str, Any]:
    kind, index = parse_case_spec(spec)
    cases = task.cases(kind)
    if index >= len(cases):
        raise UserError(f"task {task.name} has {len(cases)} {kind} cases: pick {kind[:5]}:0..{len(cases) - 1}")
    return dict(cases[index])


def pick_config(task: Any, name: str) -> Any:
    attr = {"gpu": "GPU_CONFIG", "cpu": "CPU_CONFIG"}.get(name.lower())
    if attr is None or not hasattr(task.kernel, attr):
        raise UserError(f"config {name!r} unknown for task {task.name}: use gpu or cpu")
    return getattr(task.kernel, attr)


def build_trace(task: Any, case: dict[str, Any], config: Any, traced: bool, kernel_name: str | None = None) -> Any:
    """The task's analytic model for `case`, or (traced) the interpreter trace of its kernel in identity order."""
    if not traced:
        return task.access_model(case, config=config)
    from swizzlelab.trace.tracer import trace_call

    data = task.generate_input(case)
    grid = task.tile_grid(case, config)
    # The tracer records program i as tile i: launch the identity order (a kernel's own site may be another).
    identity = task.parse_order("identity" if task.spec.grid_rank == 2 else "identity1d")
    return trace_call(
        lambda: task.custom_kernel(data, identity, config), grid, kernel_name=kernel_name, meta={"task": task.name}
    )


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("trace")
    def trace_command(
        task: str = typer.Argument(..., help="A task name or task folder."),
        case: Optional[str] = typer.Option(None, help="test:N or bench:N [default: bench:0, or test:0 with --traced]."),
        config: Optional[str] = typer.Option(None, help="gpu or cpu kernel config [default: gpu, or cpu with --traced]."),
        traced: bool = typer.Option(False, "--traced", help="Record the kernel under the Triton interpreter instead of the analytic model."),
        kernel: Optional[str] = typer.Option(None, help="With --traced: the kernel to keep when the task launches several."),
        out: Optional[Path] = typer.Option(None, help="Write the trace here (.npz)."),
    ) -> None:
        """Build a task's access trace (analytic model, or recorded under the interpreter) and summarise it."""
        from swizzlelab.tasks import load_task

        console = Console()
        loaded = load_task(task)
        chosen = pick_case(loaded, case or ("test:0" if traced else "bench:0"))
        cfg = pick_config(loaded, config or ("cpu" if traced else "gpu"))
        how = "recording under the Triton interpreter" if traced else "building the analytic model"
        with console.status(f"{how}: {loaded.name} {loaded.case_label(chosen)}"):
            trace = build_trace(loaded, chosen, cfg, traced, kernel)
        source = "traced (Triton interpreter, identity order)" if traced else "analytic model (access.py)"
        console.print(f"[bold]{loaded.name}[/] {loaded.case_label(chosen)}  config {cfg!r}", highlight=False)
        console.print(
            f"{source}: grid {'x'.join(map(str, trace.grid))}, {trace.n_tiles:,} tiles, {trace.n_steps:,} steps, "
            f"{trace.n_accesses:,} line accesses ({trace.line_bytes}-byte lines, {trace.sector_bytes}-byte sectors)",
            highlight=False,
        )
        requested = trace.requested_bytes_by_tensor()
        footprint = trace.footprint_bytes_by_tensor()
        table = Table(title="bytes per tensor, counted from the trace (no cache model)")
        for column in ("tensor", "size", "distinct sectors touched", "requested (repeats counted)", "reuse"):
            table.add_column(column, justify="left" if column == "tensor" else "right")
        for info in trace.tensors:
            reuse = requested[info.name] / footprint[info.name] if footprint[info.name] else 0.0
            table.add_row(
                info.name, _fmt_bytes(info.n_lines * trace.line_bytes), _fmt_bytes(footprint[info.name]),
                _fmt_bytes(requested[info.name]), f"{reuse:.1f}x",
            )
        console.print(table)
        if out is not None:
            path = trace.save(out)
            console.print(f"wrote {path}", highlight=False)
