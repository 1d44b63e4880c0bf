"""CLI sub-commands of swizzlelab.optimize (registered by swizzlelab.cli): `optimize`.

Library packages never import this module; it sits on top of them.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from swizzlelab.cli import userkernel as uk_cli


def register(app: typer.Typer) -> None:
    """Add `optimize` to the main app."""

    @app.command("optimize")
    def optimize_cmd(
        task: str = typer.Argument("matmul", help="task name (see `swizzlelab tasks`) or a task folder"),
        kernel: str | None = typer.Option(None, "--kernel", help="your kernel file: a @triton.jit function with a swizzle site"),
        target: str = typer.Option("auto", "--target", help="h100 | h200 | mi300x | mi325x | mi355x | auto (the local GPU, else h100)"),
        budget: int = typer.Option(20, "--budget", help="iterations after the baseline"),
        proposer: str = typer.Option("search", "--proposer", help="search | llm | both (alternating)"),
        out: str | None = typer.Option(None, "--out", help="output folder (default ./swizzlelab-out/<task>-<target>)"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        remeasure: bool = typer.Option(False, "--remeasure", help="measure again what the cache already holds"),
        occupancy: int | None = typer.Option(None, "--occupancy", help="resident programs per SM/CU in the simulator (default: the kernel's measured one on NVIDIA targets, else 1)"),
        screen_s: float = typer.Option(90.0, "--screen-s", help="seconds the search may spend ranking with the simulator"),
        measure_s: float = typer.Option(4.0, "--measure-s", help="GPU seconds per interleaved timing"),
        ncu: bool = typer.Option(True, "--ncu/--no-ncu", help="profile each measured order with Nsight Compute"),
        workers: int | None = typer.Option(None, "--workers", help="threads that rank orders with the simulator (default: all usable CPUs)"),
        config: list[str] = typer.Option([], "--config", help=uk_cli.CONFIG_HELP),
        autotune_config: int = typer.Option(0, "--autotune-config", help=uk_cli.AUTOTUNE_HELP),
        launch: str | None = typer.Option(None, "--launch", help=uk_cli.LAUNCH_HELP),
        tensor: list[str] = typer.Option([], "--tensor", help=uk_cli.TENSOR_HELP),
        arg: list[str] = typer.Option([], "--arg", help=uk_cli.ARG_HELP),
        site: str | None = typer.Option(None, "--site", help=uk_cli.SITE_HELP),
    ) -> None:
        """Find a faster block order for a kernel: propose, prove, predict, measure (on the GPU), report."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from swizzlelab.optimize.loop import Options, describe_best, run
        from swizzlelab.optimize.problem import load_problem
        from swizzlelab.cli.sim import parse_size_options
        from swizzlelab.tasks import load_task

        console = Console()
        if uk_cli.is_wild_file(kernel):
            from swizzlelab.optimize.problem import load_user_problem, resolve_target

            model = resolve_target(target).model
            user_kernel = uk_cli.open_from_options(
                kernel, model, task=None if (tensor or arg) else task,
                config=config, autotune_config=autotune_config, launch=launch, tensor=tensor, arg=arg, size=size, site=site,
            )
            for line in user_kernel.describe():
                console.print(line, highlight=False)
            problem = load_user_problem(user_kernel, target=target, occupancy=occupancy)
            console.print(user_kernel.trace().describe(), highlight=False)
            run_name = f"{user_kernel.kfile.path.stem}-{user_kernel.name}"
        else:
            loaded = load_task(task)
            cases = loaded.cases("benchmarks") or loaded.cases("tests")
            case = parse_size_options(size, dict(cases[0])) if cases else None
            problem = load_problem(task, case, target=target, kernel_file=kernel, occupancy=occupancy)
            run_name = loaded.name
        console.print(problem.target.note, highlight=False)
        short = (problem.target.model.aliases or (problem.target.model.name.lower(),))[0]
        out_dir = Path(out) if out else Path("swizzlelab-out") / f"{run_name}-{short}"
        options = Options(
            out_dir=out_dir, budget=budget, proposer=proposer, remeasure=remeasure, screen_s=screen_s,
            measure_s=measure_s, use_ncu=ncu, workers=workers, command="swizzlelab " + shlex.join(sys.argv[1:]),
        )
        with Progress(
            TextColumn("[bold]optimize[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=console, transient=False,
        ) as progress:
            bar = progress.add_task("baseline", total=budget + 1)

            def on_iteration(attempt) -> None:
                progress.update(bar, completed=attempt.iteration + 1,
                                description=f"{attempt.name()}: {attempt.status} {attempt.label}")
                progress.console.print(f"{attempt.name()}: {attempt.status}: {attempt.message}", highlight=False)

            def on_note(text: str) -> None:
                progress.console.print(f"[dim]{text}[/]", highlight=False)

            try:
                result = run(problem, options, on_note=on_note, on_iteration=on_iteration)
            except KeyboardInterrupt:
                progress.stop()
                _say_interrupted(console, out_dir)
                raise typer.Exit(130) from None
            progress.update(bar, completed=len(result.state.attempts))
        console.print(describe_best(result.state), highlight=False)
        for name, path in result.files.items():
            console.print(f"  {name:<12} {path}", highlight=False)


def _say_interrupted(console: object, out_dir: Path) -> None:
    """What Ctrl-C kept: every iteration already appended to the JSONL log, and how to go on."""
    from swizzlelab.optimize.loop import JSONL, read_jsonl

    jsonl = out_dir / JSONL
    kept = len(read_jsonl(jsonl)[1]) if jsonl.exists() else 0
    console.print(  # type: ignore[attr-defined]
        f"interrupted: {kept} iteration(s) (baseline included) are kept in {jsonl}; run the same command "
        "again to resume",
        highlight=False,
    )
