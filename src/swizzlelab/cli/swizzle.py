"""CLI sub-commands of swizzlelab.swizzle: `check` a formula on a grid, list the `families`.

Library packages never import this module; it sits on top of them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from swizzlelab.cli import userkernel as uk_cli
from swizzlelab.errors import UserError
from swizzlelab.hw import domain_sharing


def parse_grid(text: str) -> tuple[int, ...]:
    """'4096' -> (4096,), '64x64' -> (64, 64); anything else is a one-line UserError."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        grid = tuple(int(p) for p in parts)
    except ValueError:
        raise UserError(f"--grid {text!r}: write the grid as 4096 (1-D) or 64x64 (2-D)") from None
    if len(grid) not in (1, 2) or any(g < 1 for g in grid):
        raise UserError(f"--grid {text!r}: write the grid as 4096 (1-D) or 64x64 (2-D) with positive sizes")
    return grid


def parse_assignments(items: list[str] | None, option: str) -> dict[str, int]:
    """['M=4096', 'N=512'] -> {'M': 4096, 'N': 512}."""
    values: dict[str, int] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise UserError(f"{option} {item!r}: write NAME=VALUE, e.g. {option} M=4096")
        try:
            values[name.strip()] = int(value, 0)
        except ValueError:
            raise UserError(f"{option} {item!r}: {value!r} is not an integer") from None
    return values


class _Progress:
    """A rich progress bar on stderr that appears only once the work has taken SHOW_AFTER_S seconds."""

    SHOW_AFTER_S = 2.0

    def __init__(self, description: str):
        self.description = description
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> "_Progress":
        return self

    def update(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.started < self.SHOW_AFTER_S or done >= total:
                return
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} programs"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=total)
        assert self.task is not None
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("version")
    def version() -> None:
        """Print swizzlelab's version."""
        from swizzlelab import __version__

        typer.echo(__version__)

    @app.command("check")
    def check(
        formula: str = typer.Argument(..., help="formula .py file, or a family spec such as grouped:GROUP_M=8"),
        grid: Optional[str] = typer.Option(None, "--grid", help="tile grid: 4096 (1-D) or 64x64 (2-D); with --kernel, the traced kernel's"),
        arg: Optional[list[str]] = typer.Option(None, "--arg", help="runtime kernel argument NAME=VALUE"),
        const: Optional[list[str]] = typer.Option(None, "--const", help="constexpr NAME=VALUE"),
        outputs: Optional[str] = typer.Option(None, "--outputs", help="names the kernel uses, e.g. pid_m,pid_n"),
        target: Optional[str] = typer.Option(None, "--target", help="hardware model, e.g. mi300x, for L2-domain sharing"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON record instead of text"),
        show_code: bool = typer.Option(False, "--emit", help="also print the Triton code to splice in"),
        kernel: Optional[str] = uk_cli.kernel_opt(),
        config: list[str] = uk_cli.config_opt(),
        autotune_config: Optional[int] = uk_cli.autotune_opt(),
        launch: Optional[str] = uk_cli.launch_opt(),
        tensor: list[str] = uk_cli.tensor_opt(),
        site: Optional[str] = uk_cli.site_opt(),
        inputs: Optional[str] = uk_cli.inputs_opt(),
        size: list[str] = typer.Option([], "--size", help="with --kernel: sizes of the wrapper's inputs NAME=N"),
        task: Optional[str] = typer.Option(None, "--task", help="with --kernel: the task whose generate_input makes the wrapper's inputs"),
    ) -> None:
        """Prove a formula is a bijection on a grid; print its defects or its canonical permutation id."""
        from swizzlelab.swizzle import check_order, emit_triton, parse_formula, parse_order
        from swizzlelab.swizzle.lang import read_formula_file

        if kernel:
            # a kernel file as people write it: grid, runtime values and constexprs from tracing its launch

            options = uk_cli.KernelOptions(task, config, autotune_config, launch, tensor,
                                           [a for a in (arg or []) if "=" in a], size, site, inputs)
            scenario = uk_cli.user_scenario(Console(stderr=True), kernel, options, target=target or "h100",
                                            occupancy=None, simulates=False)
            grid = "x".join(map(str, scenario.grid))
            tile_grid, args, consts = scenario.grid, dict(scenario.args), dict(scenario.consts)
        elif grid is None:
            raise UserError("give the tile grid with --grid (e.g. --grid 64x64), or --kernel FILE to take it from a kernel")
        else:
            tile_grid = parse_grid(grid)
            args = parse_assignments(arg, "--arg")
            consts = parse_assignments(const, "--const")
        names = tuple(o.strip() for o in outputs.split(",")) if outputs else None
        path = Path(formula)
        if path.exists() or formula.endswith(".py") or "/" in formula:
            parsed = parse_formula(read_formula_file(path), names, rank=len(tile_grid))
        else:
            if names:
                raise UserError("--outputs names the outputs of a formula file; a family spec yields its own")
            parsed = parse_order(formula, len(tile_grid))
        with _Progress(f"proving on grid {grid}") as progress:
            result = check_order(parsed, tile_grid, args, consts, keep_perm=bool(target), progress=progress.update)
        proof = result.proof
        record: dict[str, object] = {"formula": formula, **proof.to_dict()}
        if result.notes:
            record["notes"] = list(result.notes)
        sharing = None
        if proof.is_bijection:
            record["permutation_id"] = result.permutation_id
            if target:
                from swizzlelab.hw import get_model

                model = get_model(target)
                record["target"] = model.name
                if model.n_domains > 1 and result.perm is not None:
                    sharing = domain_sharing(result.perm, tile_grid, model)
                    record["domain_sharing"] = sharing
        if as_json:
            typer.echo(json.dumps(record, indent=2))
        else:
            console = Console()
            style = "green" if proof.is_bijection else "bold red"
            for note in result.notes:
                console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
            console.print(f"[{style}]{proof.message()}[/]", highlight=False, soft_wrap=True)
            if proof.is_bijection:
                console.print(f"permutation id: [bold]{record['permutation_id']}[/]")
            if sharing:
                table = Table(title=f"tiles per L2 domain under round-robin dispatch ({record['target']}, from the formula)")
                columns = list(sharing[0])
                for column in columns:
                    table.add_column(column.replace("_", " "), justify="right")
                for row in sharing:
                    table.add_row(*(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in columns))
                console.print(table)
            if show_code:
                console.print(emit_triton(parsed), highlight=False, markup=False)
        if not proof.is_bijection:
            raise typer.Exit(1)

    @app.command("families")
    def families() -> None:
        """List the built-in order families and their parameters."""
        from swizzlelab.swizzle import FAMILIES

        table = Table(title="swizzle families", caption=(
            "compose: LINEAR+FAMILY, e.g. xcd:NUM_XCDS=8+grouped:GROUP_M=8; nest: OUTER>INNER@BMxBN, e.g. "
            "serpentine>column_major@11x8 (blocks walked by OUTER, tiles of a block by INNER); docs/orders.md"))
        table.add_column("name")
        table.add_column("kind")
        table.add_column("parameters")
        table.add_column("order")
        for name, spec in FAMILIES.items():
            params = ", ".join(f"{p.name}={p.default}" for p in spec.params) or "-"
            table.add_row(name, spec.kind, params, spec.doc)
        Console().print(table)
