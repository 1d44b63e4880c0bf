"""CLI sub-command `optimize`: propose, prove, predict and (on a matching GPU) measure orders; write the logs.

The scenario (task, case, kernel, target, occupancy) comes from swizzlelab.scenario, as for every command.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console

from swizzlelab.cli import userkernel as uk_cli
from swizzlelab.cli.common import (
    console,
    k_dir_opt,
    outputs_option,
    parse_duration,
    progress_bar,
    split_outputs,
    wave_sync_opt,
)
from swizzlelab.hw import targets_help
from swizzlelab.optimize.llm import config_from_env
from swizzlelab.optimize.loop import JSONL, Options, describe_best, read_jsonl, run
from swizzlelab.optimize.report import separation
from swizzlelab.optimize.sweep import MEASURED_BUDGET, REFINE_SIZE
from swizzlelab.scenario import load_scenario

DEFAULT_OUT = Path("swizzlelab-out")


def register(app: typer.Typer) -> None:
    """Add `optimize` to the main app."""

    @app.command("optimize")
    def optimize_cmd(
        task: str | None = typer.Argument(None, help="task name (see `swizzlelab tasks`) or a task folder (default matmul); with --kernel, the task whose generate_input makes the wrapper's inputs"),
        kernel: str | None = typer.Option(None, "--kernel", help="your kernel file: a @triton.jit function with a swizzle site"),
        target: str = typer.Option("auto", "--target", help=f"{targets_help()} | auto (the local GPU, else h100)"),
        budget: int | None = typer.Option(None, "--budget", help="iterations after the baseline (orders evaluated; "
                                          f"default {Options.budget}, and with a local GPU as many as the time "
                                          f"budget allows, at most {MEASURED_BUDGET})"),
        time_budget: str | None = typer.Option(None, "--time-budget", help="with a local GPU: wall time the run may "
                                               "take from its start, e.g. 3m or 90s (default: sized to the kernel's "
                                               "measured time, 75-150 s); no new race of orders starts after it"),
        proposer: str = typer.Option("search", "--proposer", help="search | llm | both (alternating); llm reads "
                                     "OPENAI_BASE_URL (docs/llm.md starts a local model)"),
        log_prompts: bool = typer.Option(False, "--log-prompts", help="keep each LLM prompt and reply in log.txt"),
        out: str | None = typer.Option(None, "--out", help=f"output folder (default ./{DEFAULT_OUT}/<task>-<target>, <file>-<kernel>-<target> for --kernel FILE)"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        outputs: str | None = typer.Option(None, "--outputs", help=outputs_option()),
        remeasure: bool = typer.Option(False, "--remeasure", help="measure again what the cache already holds"),
        occupancy: int | None = typer.Option(None, "--occupancy", help="resident programs per SM/CU in the simulator (default: the kernel's measured one on NVIDIA targets, else 1)"),
        screen_s: float = typer.Option(90.0, "--screen-s", help="seconds the search may spend ranking with the simulator"),
        measure_s: float = typer.Option(4.0, "--measure-s", help="GPU seconds per interleaved timing"),
        ncu: bool = typer.Option(True, "--ncu/--no-ncu", help="profile each measured order with Nsight Compute"),
        keep_going: bool = typer.Option(False, "--keep-going", help="measure the budget's orders even when the time "
                                        "model predicts none gains more than the measurement resolves"),
        workers: int | None = typer.Option(None, "--workers", help="threads that rank orders with the simulator (default: all usable CPUs)"),
        sim_engine: str = typer.Option("auto", "--sim-engine", help="auto (a GPU where one is usable, else the CPU) | cpu | gpu: where the simulator runs; the same predictions on each"),
        config: list[str] = typer.Option([], "--config", help=uk_cli.CONFIG_HELP),
        autotune_config: int | None = typer.Option(None, "--autotune-config", help=uk_cli.AUTOTUNE_HELP),
        launch: str | None = typer.Option(None, "--launch", help=uk_cli.LAUNCH_HELP),
        tensor: list[str] = typer.Option([], "--tensor", help=uk_cli.TENSOR_HELP),
        arg: list[str] = typer.Option([], "--arg", help=uk_cli.ARG_HELP),
        site: str | None = typer.Option(None, "--site", help=uk_cli.SITE_HELP),
        inputs: str | None = typer.Option(None, "--inputs", help=uk_cli.INPUTS_HELP),
        k_dir: str = k_dir_opt(),
        wave_sync: bool = wave_sync_opt(),
    ) -> None:
        """Find a faster block order for a kernel: propose, prove, predict, measure (on the GPU), report."""
        out_console = console()
        time_budget_s = parse_duration(time_budget, "--time-budget")
        opened = uk_cli.load_kernel_option(kernel, target)
        if opened is not None and not opened.is_task_kernel:
            # optimize measures orders: they run at the config the kernel's own autotuner picks (on a GPU)
            options = uk_cli.KernelOptions(task, config, autotune_config, launch, tensor, arg, size, site, inputs,
                                           own_autotune=True)
            scenario = uk_cli.user_scenario(out_console, opened, options, target=target, occupancy=occupancy,
                                            k_dir=k_dir, wave_sync=wave_sync)
        else:
            scenario = load_scenario(task or "matmul", sizes=size, target=opened.target if opened else target,
                                     occupancy=occupancy, kernel_file=opened.kfile if opened else None,
                                     outputs=split_outputs(outputs), k_dir=k_dir, wave_sync=wave_sync)
        out_console.print(scenario.target.note, highlight=False)
        out_console.print(scenario.header(), highlight=False)
        run_name = scenario.task.name.replace(":", "-")
        out_dir = Path(out) if out else DEFAULT_OUT / f"{run_name}-{scenario.target.short_name}"
        options = Options(
            out_dir=out_dir, budget=budget if budget is not None else Options.budget, budget_given=budget is not None,
            proposer=proposer, remeasure=remeasure, screen_s=screen_s,
            measure_s=measure_s, use_ncu=ncu, workers=workers, sim_engine=sim_engine, stop_without_gain=not keep_going,
            time_budget_s=time_budget_s,
            llm=config_from_env(log_prompts=True) if log_prompts else None,
            command="swizzlelab " + shlex.join(sys.argv[1:]),
        )
        # Without --budget a measuring run may time up to MEASURED_BUDGET orders: the bar grows when it does.
        total = options.budget + 1
        with progress_bar(out_console, transient=False, label="[bold]optimize[/]") as progress:
            bar = progress.add_task("baseline", total=total)

            def on_iteration(attempt) -> None:
                nonlocal total
                if attempt.iteration + 1 > total:  # never with a given --budget
                    total = min(attempt.iteration + 1 + REFINE_SIZE, MEASURED_BUDGET + 1)
                progress.update(bar, completed=min(attempt.iteration + 1, total), total=total,
                                description=f"{attempt.name()}: {attempt.status} {attempt.label}")
                progress.console.print(f"{attempt.name()} ({attempt.label}): {attempt.status}: {attempt.message}",
                                       highlight=False)

            def on_note(text: str) -> None:
                progress.console.print(f"[dim]{text}[/]", highlight=False)

            screening: list = []

            def on_screen(done: int, total: int) -> None:
                if not screening:
                    screening.append(progress.add_task("ranking orders with the simulator", total=total))
                progress.update(screening[0], completed=done, total=total)

            try:
                result = run(scenario, options, on_note=on_note, on_iteration=on_iteration, on_screen=on_screen)
            except KeyboardInterrupt:
                progress.stop()
                _say_interrupted(out_console, out_dir)
                raise typer.Exit(130) from None
            progress.update(bar, completed=min(len(result.state.attempts), total))
        out_console.print(describe_best(result.state), highlight=False)
        out_console.print(separation(result.state)[1], highlight=False)
        for name, path in result.files.items():
            out_console.print(f"  {name:<12} {path}", highlight=False)


def _say_interrupted(out_console: Console, out_dir: Path) -> None:
    """What Ctrl-C kept: every iteration already appended to the JSONL log, and how to go on."""
    jsonl = out_dir / JSONL
    kept = len(read_jsonl(jsonl)[1]) if jsonl.exists() else 0
    out_console.print(
        f"interrupted: {kept} iteration(s) (baseline included) are kept in {jsonl}; run the same command "
        "again to resume",
        highlight=False,
    )
