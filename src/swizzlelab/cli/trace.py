"""CLI sub-command `trace`: build (or record under the interpreter) a task's access trace and summarise it.

The case, configuration and grid come from swizzlelab.scenario, as for every command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from swizzlelab.cli.common import console, progress_bar
from swizzlelab.fmt import fmt_bytes, grid_text
from swizzlelab.scenario import load_scenario


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("trace")
    def trace_command(
        task: str = typer.Argument(..., help="A task name or task folder."),
        case: Optional[str] = typer.Option(None, help="test:N or bench:N [default: bench:0, or test:0 with --traced]."),
        config: Optional[str] = typer.Option(None, help="gpu or cpu kernel config [default: gpu, or cpu with --traced]."),
        traced: bool = typer.Option(False, "--traced", help="Record the kernel under the Triton interpreter instead of the analytic model."),
        kernel: Optional[str] = typer.Option(None, help="With --traced: the kernel to keep when the task launches several."),
        size: list[str] = typer.Option([], "--size", help="override a size of the case: NAME=VALUE"),
        out: Optional[Path] = typer.Option(None, help="Write the trace here (.npz)."),
    ) -> None:
        """Build a task's access trace (analytic model, or recorded under the interpreter) and summarise it."""
        out_console = console()
        scenario = load_scenario(task, case or ("test:0" if traced else "bench:0"), sizes=size,
                                 config=config or ("cpu" if traced else "gpu"))
        how = "recording under the Triton interpreter" if traced else "building the analytic model"
        with progress_bar(console(stderr=True), label="[bold]trace[/]") as progress:
            job = progress.add_task(f"{how}: {scenario.label()}", total=None)
            trace = scenario.recorded_trace(kernel) if traced else scenario.trace
            if out is not None:
                progress.update(job, description=f"writing {out} ({trace.n_accesses:,} line accesses, compressed)")
                path = trace.save(out)
        source = "traced (Triton interpreter, identity order)" if traced else "analytic model (access.py)"
        out_console.print(f"[bold]{scenario.task.name}[/] {scenario.task.case_label(scenario.case)}  config "
                          f"{scenario.config!r}", highlight=False)
        out_console.print(
            f"{source}: grid {grid_text(trace.grid)}, {trace.n_tiles:,} tiles, {trace.n_steps:,} steps, "
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
                info.name, fmt_bytes(info.n_lines * trace.line_bytes), fmt_bytes(footprint[info.name]),
                fmt_bytes(requested[info.name]), f"{reuse:.1f}x",
            )
        out_console.print(table)
        if out is not None:
            out_console.print(f"wrote {path}", highlight=False)
