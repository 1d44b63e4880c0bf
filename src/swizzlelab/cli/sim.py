"""CLI sub-commands `analyze` (memory reuse of a task) and `simulate` (predicted L2 behaviour under orders).

Both build their scenario with swizzlelab.scenario.load_scenario, as every command does.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from swizzlelab.cli import userkernel as uk_cli
from swizzlelab.cli.common import console, k_dir_opt, outputs_option, progress_bar, split_outputs, wave_sync_opt
from swizzlelab.errors import UserError
from swizzlelab.hw import targets_help
from swizzlelab.scenario import Scenario, load_scenario
from swizzlelab.sim import CacheGeometry, SimParams, analyze, footprint_of, simulate_many
from swizzlelab.sim.agreement import RESOLUTION_DRAM_REL, RESOLUTION_HIT_PP, RESOLUTION_TEXT, below_resolution

KERNEL_ORDER = "the kernel's own order"


def register(app: typer.Typer) -> None:
    """Add `analyze` and `simulate` to the main app."""

    @app.command("analyze")
    def analyze_cmd(
        task: Optional[str] = typer.Argument(None, help="task name (see `swizzlelab tasks`) or a task folder; with --kernel, the task whose generate_input makes the wrapper's inputs"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        target: str = typer.Option("h100", "--target", help=f"hardware model: {targets_help()}"),
        occupancy: Optional[int] = typer.Option(
            None, "--occupancy", help="resident programs per SM/CU (default: the kernel's measured one on NVIDIA "
            "targets, else 1)"),
        order: Optional[str] = typer.Option(None, "--order", help="also predict this order (FAMILY:PARAMS or .py)"),
        outputs: Optional[str] = typer.Option(None, "--outputs", help=outputs_option()),
        as_json: bool = typer.Option(False, "--json", help="print a JSON record instead of text"),
        kernel: Optional[str] = uk_cli.kernel_opt(),
        config: list[str] = uk_cli.config_opt(),
        autotune_config: Optional[int] = uk_cli.autotune_opt(),
        launch: Optional[str] = uk_cli.launch_opt(),
        tensor: list[str] = uk_cli.tensor_opt(),
        arg: list[str] = uk_cli.arg_opt(),
        site: Optional[str] = uk_cli.site_opt(),
        inputs: Optional[str] = uk_cli.inputs_opt(),
    ) -> None:
        """Memory analysis of a task: footprints, reuse, which programs share data, best reachable hit rate."""
        err = console(stderr=True)
        options = uk_cli.KernelOptions(task, config, autotune_config, launch, tensor, arg, size, site, inputs)
        scenario = _scenario(kernel, options, target, occupancy, outputs)
        perm = scenario.permutation(order) if order else None
        with err.status(f"tracing {scenario.label()} ..."):
            trace = scenario.trace
        with err.status(f"analysing {trace.lines.size:,} line accesses on {scenario.model.name} ..."):
            result = analyze(trace, scenario.model, perm=perm, occupancy=scenario.occupancy.programs,
                             order_label=order or "")
        if as_json:
            record = {"task": scenario.task.name, "case": scenario.case, "occupancy_source": scenario.occupancy.source,
                      **result.to_dict()}
            typer.echo(json.dumps(record, indent=2, default=str))
            return
        typer.echo(scenario.header())
        typer.echo(result.text())

    @app.command("simulate")
    def simulate_cmd(
        task: Optional[str] = typer.Argument(None, help="task name (see `swizzlelab tasks`) or a task folder; with --kernel, the task whose generate_input makes the wrapper's inputs"),
        order: list[str] = typer.Option(
            [], "--order", help="FAMILY:PARAMS or a formula .py; repeat to compare (default: the kernel's own order)"),
        target: str = typer.Option("h100", "--target", help=f"hardware model: {targets_help()}"),
        size: list[str] = typer.Option([], "--size", help="override a size of the first benchmark case: NAME=VALUE"),
        occupancy: Optional[int] = typer.Option(
            None, "--occupancy", help="resident programs per SM/CU (default: the kernel's measured one on NVIDIA "
            "targets, else 1)"),
        outputs: Optional[str] = typer.Option(None, "--outputs", help=outputs_option()),
        assoc: Optional[int] = typer.Option(
            None, "--assoc", help="ways per L2 set (default: the model's, as optimize uses; the saturating progress "
            "model runs on set-associative caches only)"),
        step_cv: Optional[float] = typer.Option(
            None, "--step-cv", help="spread of a program step's duration, 0..1 (default: the progress model's value, "
            "fitted on an H100 and an H200; 0 = resident programs in lockstep)"),
        progress_model: Optional[str] = typer.Option(
            None, "--progress", help="progress model: saturating (SM pace for L2-bound kernels until DRAM "
            "saturates), contention (default on NVIDIA targets: saturating, plus no SM pace while reads crowd onto "
            "shared lines, older programs first, spread on the DRAM queue only, jittered request times) or "
            "random_walk (independent step times; the default elsewhere)"),
        engine: str = typer.Option(
            "auto", "--engine", help="auto (CPU), sets (CPU, set-partitioned) or gpu (a CUDA GPU through numba.cuda "
            "and CuPy; the same results); several orders run side by side"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON record instead of text"),
        k_dir: str = k_dir_opt(),
        wave_sync: bool = wave_sync_opt(),
        kernel: Optional[str] = uk_cli.kernel_opt(),
        config: list[str] = uk_cli.config_opt(),
        autotune_config: Optional[int] = uk_cli.autotune_opt(),
        launch: Optional[str] = uk_cli.launch_opt(),
        tensor: list[str] = uk_cli.tensor_opt(),
        arg: list[str] = uk_cli.arg_opt(),
        site: Optional[str] = uk_cli.site_opt(),
        inputs: Optional[str] = uk_cli.inputs_opt(),
    ) -> None:
        """Predict L2 hit rate and DRAM traffic of a task under one or more launch orders."""
        err = console(stderr=True)
        options = uk_cli.KernelOptions(task, config, autotune_config, launch, tensor, arg, size, site, inputs)
        scenario = _scenario(kernel, options, target, occupancy, outputs, k_dir, wave_sync)
        specs = list(order) or [None]
        perms = [(spec or KERNEL_ORDER, scenario.permutation(spec)) for spec in specs]
        with err.status(f"tracing {scenario.label()} ..."):
            trace = scenario.trace
            footprint = footprint_of(trace)
        with progress_bar(err, transient=True) as progress:
            job = progress.add_task(f"simulating {len(perms)} order(s) on {scenario.model.name}", total=len(perms))
            done = simulate_many(
                [(scenario.trace_for(perm), perm) for _, perm in perms], scenario.model,
                SimParams(progress=progress_model, step_cv=step_cv), engine,
                on_done=lambda i, r: progress.advance(job), occupancy=scenario.occupancy.programs,
                geometry=CacheGeometry(assoc if assoc is not None else "model"), footprint=footprint,
                wave_sync=scenario.wave_sync)
        results = [(label, perm, res) for (label, perm), res in zip(perms, done)]
        close = below_resolution([label for label, _, _ in results], [r.dram_read_bytes for _, _, r in results],
                                 [100 * r.l2_hit_rate for _, _, r in results])
        if as_json:
            record = {
                "task": scenario.task.name,
                "case": scenario.case,
                "grid": list(scenario.grid),
                "target": scenario.model.name,
                "occupancy": scenario.occupancy.programs,
                "occupancy_source": scenario.occupancy.source,
                "kind": f"predicted (model {scenario.model.name})",
                "orders": [{"order": label, "permutation_id": perm.id, **res.to_dict()} for label, perm, res in results],
                "resolution": {"dram_read_rel": RESOLUTION_DRAM_REL, "l2_hit_pp": RESOLUTION_HIT_PP},
                "below_resolution": [list(pair) for pair in close],
            }
            typer.echo(json.dumps(record, indent=2, default=str))
            return
        typer.echo(scenario.header())
        for label, perm, res in results:
            typer.echo(f"\norder {label}  (permutation {perm.id})")
            typer.echo(res.text())
        if close:
            typer.echo(f"\nbelow the model's resolution (predicted {RESOLUTION_TEXT}; such pairs ranked as ncu did "
                       f"about half the time, docs/hit-rates.md): " + ", ".join(f"{a} ~ {b}" for a, b in close)
                       + "; measure them (swizzlelab eval or optimize)")



def _scenario(kernel: str | None, options: uk_cli.KernelOptions, target: str, occupancy: int | None,
              outputs: str | None, k_dir: str = "forward", wave_sync: bool = False) -> Scenario:
    """The task's scenario (with --kernel a task kernel module in place of the task's), or with --kernel a kernel
    file as people write it (traced through its wrapper)."""
    opened = uk_cli.load_kernel_option(kernel, target)
    if opened is not None and not opened.is_task_kernel:
        return uk_cli.user_scenario(console(stderr=True), opened, options, target=target, occupancy=occupancy,
                                    k_dir=k_dir, wave_sync=wave_sync)
    if options.task is None:
        raise UserError("name a task (see `swizzlelab tasks`) or give --kernel FILE")
    return load_scenario(options.task, sizes=options.size, target=opened.target if opened else target,
                         occupancy=occupancy, kernel_file=opened.kfile if opened else None,
                         outputs=split_outputs(outputs), k_dir=k_dir, wave_sync=wave_sync)
