"""CLI sub-commands of swizzlelab.sim: `analyze` (memory reuse of a task) and `simulate` (L2 under an order).

Library packages never import this module; it sits on top of them.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from swizzlelab.errors import UserError


def parse_size_options(items: list[str], case: dict[str, Any]) -> dict[str, Any]:
    """Apply `NAME=VALUE` overrides to a task case; values keep the type of the case's own value."""
    out = dict(case)
    for item in items:
        if "=" not in item:
            raise UserError(f"--size {item!r} is not NAME=VALUE: write e.g. --size m=4096")
        name, text = (part.strip() for part in item.split("=", 1))
        if name not in case or name == "seed":
            known = ", ".join(k for k in case if k != "seed")
            raise UserError(f"--size {name}: this task's sizes are {known}")
        current = case[name]
        try:
            if isinstance(current, bool):
                value: Any = text.lower() in ("1", "true", "yes")
            elif isinstance(current, int):
                value = int(text)
            elif isinstance(current, float):
                value = float(text)
            else:
                value = text
        except ValueError:
            raise UserError(f"--size {name}={text}: expected a {type(current).__name__}") from None
        out[name] = value
    return out


def gpu_config(task: Any) -> Any:
    """The task kernel's GPU launch configuration (the simulator models the GPU even on a CPU machine)."""
    return getattr(task.kernel, "GPU_CONFIG", None)


def load_case(task_name: str, sizes: list[str]) -> tuple[Any, dict[str, Any], Any]:
    """(task, case with overrides, GPU config) for a task name; the case defaults to its first benchmark."""
    from swizzlelab.tasks import load_task

    task = load_task(task_name)
    cases = task.cases("benchmarks") or task.cases("tests")
    if not cases:
        raise UserError(f"task {task.name} lists no benchmark or test cases in task.yml: add one")
    return task, parse_size_options(sizes, dict(cases[0])), gpu_config(task)


def build_trace(task: Any, case: dict[str, Any], config: Any) -> Any:
    """The task's analytic access trace of `case` under the GPU configuration."""
    if not task.has_access_model:
        raise UserError(f"task {task.name} has no access model (access.py): the simulator needs one")
    return task.access_model(case, config=config) if config is not None else task.access_model(case)


def build_perm(task: Any, case: dict[str, Any], config: Any, spec: str) -> Any:
    """The proven Permutation of an order spec (FAMILY:PARAMS or a formula .py) on the case's tile grid."""
    from swizzlelab.swizzle import to_permutation

    formula = task.parse_order(spec)
    grid = task.tile_grid(case, config)
    args, consts = task.swizzle_args(case, config)
    return to_permutation(formula, grid, args, consts)


def register(app: typer.Typer) -> None:
    """Add `analyze` and `simulate` to the main app."""

    @app.command("analyze")
    def analyze_cmd(
        task: str = typer.Argument(..., help="task name (see `swizzlelab tasks`) or a task folder"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        target: str = typer.Option("h100", "--target", help="hardware model: h100, h200, mi300x, mi325x, mi355x"),
        occupancy: int = typer.Option(1, "--occupancy", help="resident programs per SM/CU"),
        order: Optional[str] = typer.Option(None, "--order", help="also predict this order (FAMILY:PARAMS or .py)"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON record instead of text"),
    ) -> None:
        """Memory analysis of a task: footprints, reuse, which programs share data, best reachable hit rate."""
        from rich.console import Console

        from swizzlelab.hw import get_model
        from swizzlelab.sim import analyze

        console = Console(stderr=True)
        model = get_model(target)
        loaded, case, config = load_case(task, size)
        with console.status(f"tracing {loaded.name} {loaded.case_label(case)} ..."):
            trace = build_trace(loaded, case, config)
        perm = None
        if order:
            perm = build_perm(loaded, case, config, order)
        with console.status(f"analysing {trace.lines.size:,} line accesses on {model.name} ..."):
            result = analyze(trace, model, perm=perm, occupancy=occupancy, order_label=order or "")
        if as_json:
            record = {"task": loaded.name, "case": case, **result.to_dict()}
            typer.echo(json.dumps(record, indent=2, default=str))
            return
        typer.echo(f"task {loaded.name}, {loaded.case_label(case)}, target {model.name}")
        typer.echo(result.text())

    @app.command("simulate")
    def simulate_cmd(
        task: str = typer.Argument(..., help="task name (see `swizzlelab tasks`) or a task folder"),
        order: list[str] = typer.Option(..., "--order", help="FAMILY:PARAMS or a formula .py; repeat to compare"),
        target: str = typer.Option("h100", "--target", help="hardware model: h100, h200, mi300x, mi325x, mi355x"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        occupancy: int = typer.Option(1, "--occupancy", help="resident programs per SM/CU"),
        assoc: Optional[int] = typer.Option(None, "--assoc", help="ways per set (default: fully associative LRU)"),
        step_cv: Optional[float] = typer.Option(
            None, "--step-cv", help="spread of a program step's duration, 0..1 (default: the value fitted on an "
            "H100; 0 = resident programs in lockstep)"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON record instead of text"),
    ) -> None:
        """Predict L2 hit rate and DRAM traffic of a task under one or more launch orders."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from swizzlelab.hw import get_model
        from swizzlelab.sim import footprint_of, simulate

        console = Console(stderr=True)
        model = get_model(target)
        loaded, case, config = load_case(task, size)
        perms = [(spec, build_perm(loaded, case, config, spec)) for spec in order]
        with console.status(f"tracing {loaded.name} {loaded.case_label(case)} ..."):
            trace = build_trace(loaded, case, config)
            footprint = footprint_of(trace)
        results = []
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console, transient=True,
        ) as progress:
            job = progress.add_task(f"simulating on {model.name}", total=len(perms))
            for spec, perm in perms:
                progress.update(job, description=f"simulating {spec} on {model.name}")
                results.append(
                    (spec, perm, simulate(trace, perm, model, occupancy=occupancy, assoc=assoc, footprint=footprint,
                              step_cv=step_cv))
                )
                progress.advance(job)
        if as_json:
            record = {
                "task": loaded.name,
                "case": case,
                "target": model.name,
                "kind": f"predicted (model {model.name})",
                "orders": [{"order": spec, "permutation_id": perm.id, **res.to_dict()} for spec, perm, res in results],
            }
            typer.echo(json.dumps(record, indent=2, default=str))
            return
        typer.echo(f"task {loaded.name}, {loaded.case_label(case)}, target {model.name}, occupancy {occupancy}")
        for spec, perm, res in results:
            typer.echo(f"\norder {spec}  (permutation {perm.id})")
            typer.echo(res.text())
