"""CLI sub-command of swizzlelab.tasks: `swizzlelab tasks` lists the tasks, `swizzlelab tasks NAME` shows one.

Library packages never import this module; it sits on top of them.
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from swizzlelab.tasks import list_tasks, load_task


def _grid_text(task: Any, case: dict[str, Any], config: Any) -> str:
    grid = task.tile_grid(case, config)
    return "x".join(str(g) for g in grid)


def _show_task(console: Console, task: Any) -> None:
    spec = task.spec
    console.print(f"[bold]{task.name}[/]  ({task.path})")
    console.print(spec.description, highlight=False)
    console.print(
        f"tolerance: rtol={spec.tolerance.rtol:g} atol={spec.tolerance.atol:g}   ranking: {spec.ranking}   "
        f"grid rank: {spec.grid_rank}   access model: {'yes' if task.has_access_model else 'no'}",
        highlight=False,
    )
    console.print(f"default order: {spec.default_order}", highlight=False)
    gpu_config = getattr(task.kernel, "GPU_CONFIG", None)
    cpu_config = getattr(task.kernel, "CPU_CONFIG", None)
    table = Table(title="cases (tile grids for the kernel's GPU and CPU-interpreter configs)")
    for column in ("kind", "case", "tile grid (GPU)", "tile grid (CPU)"):
        table.add_column(column)
    for kind in ("tests", "benchmarks"):
        for case in task.cases(kind):
            table.add_row(
                kind,
                task.case_label(case),
                _grid_text(task, case, gpu_config) if gpu_config is not None else "-",
                _grid_text(task, case, cpu_config) if cpu_config is not None else "-",
            )
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("tasks")
    def tasks_command(
        task: Optional[str] = typer.Argument(None, help="A task name or a task folder to describe; omit to list all."),
    ) -> None:
        """List the built-in tasks, or describe one task (its cases and tile grids)."""
        console = Console()
        if task is not None:
            _show_task(console, load_task(task))
            return
        table = Table(title="swizzlelab tasks")
        for column, justify in (("name", "left"), ("description", "left"), ("grid rank", "right"),
                                ("#tests", "right"), ("#benchmarks", "right")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for loaded in list_tasks():
            summary = loaded.spec.description.split(". ")[0].rstrip(".")
            summary = summary if len(summary) <= 72 else summary[:71].rstrip() + "…"
            table.add_row(loaded.name, summary, str(loaded.spec.grid_rank), str(len(loaded.spec.tests)),
                          str(len(loaded.spec.benchmarks)))
        console.print(table)
