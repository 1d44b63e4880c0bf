"""CLI options shared by the commands that accept a kernel file as people write it (--kernel FILE[:KERNEL]):
turn --config/--autotune-config/--launch/--tensor/--arg/--inputs/--size into a swizzlelab.userkernel.UserKernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from swizzlelab.errors import UserError

CONFIG_HELP = "constexprs/launch options forced on the kernel, e.g. BLOCK_SIZE_M=128,GROUP_SIZE_M=8,num_warps=8 (default: the first autotune config, else the launch's own)"
AUTOTUNE_HELP = "which @triton.autotune config to start from (0-based; printed)"
LAUNCH_HELP = "the wrapper that launches the kernel: FUNCTION of the kernel file, FILE.py:FUNCTION or module:function (default: the file's one function that launches it)"
TENSOR_HELP = "an input of the wrapper: NAME=DTYPE[DIM,...], dims numbers or --size names, e.g. a=float16[M,K]; a list of tensors as NAME=[DTYPE[DIM,...],...]"
INPUTS_HELP = "FILE.py:FUNCTION returning the wrapper's arguments as a dict (for inputs with structure, e.g. MoE routing); its parameters are filled from --size, seed and device"
SITE_HELP = "file lines of the remap block to take as the swizzle site, A-B (default: found automatically)"
ARG_HELP = "a scalar input of the wrapper: NAME=VALUE, e.g. sm_scale=0.125"


def is_wild_file(kernel: str | None) -> bool:
    """Whether --kernel names a file as people write it (no task-style custom_kernel/tile_grid in it)."""
    if not kernel:
        return False
    path = kernel.rpartition(":")[0] if kernel.rpartition(":")[0].endswith(".py") else kernel
    file = Path(path)
    if not file.is_file():
        raise UserError(f"--kernel {kernel}: no such file; give a .py file with a @triton.jit kernel")
    text = file.read_text()
    return not ("def custom_kernel" in text and "def tile_grid" in text)


def parse_sizes(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip() or not raw.strip().isdigit() or int(raw) < 1:
            raise UserError(f"--size {item!r}: write NAME=N with N >= 1, e.g. --size M=4096")
        out[name.strip()] = int(raw)
    return out


def open_from_options(
    kernel: str, target_model: Any, *, task: str | None, config: list[str], autotune_config: int,
    launch: str | None, tensor: list[str], arg: list[str], size: list[str], seed: int = 0, site: str | None = None,
    inputs: str | None = None,
) -> Any:
    """The UserKernel the options describe. The wrapper's inputs: the task's generate_input on its first benchmark
    case (--size overrides the case's sizes) and/or an --inputs function, overlaid by --tensor and --arg."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_config_option, parse_scalar, parse_tensor_spec

    overrides = parse_config_option(config)
    sizes = parse_sizes(size)
    loaded = None
    if task:
        from swizzlelab.scenario import apply_sizes, pick_case
        from swizzlelab.tasks import load_task

        loaded = load_task(task)
        case = pick_case(loaded, None)
        # sizes the task's case has set its case; the others (tensor dims) are the tensors' own
        case = apply_sizes([item for item in size if item.partition("=")[0].strip() in case], case)
        seed = int(case.get("seed", seed))
        sizes = {**{k: v for k, v in case.items() if k != "seed"}, **sizes}
    given = Inputs(tuple(parse_tensor_spec(t) for t in tensor), dict(parse_scalar(a) for a in arg), sizes, seed,
                   loaded, inputs)
    return open_user_kernel(kernel, target_model, config=overrides, autotune_index=autotune_config,
                            launch=launch, inputs=given, site=site)


def user_scenario(out_console: Any, kernel: str, *, target: str, occupancy: int | None, task: str | None,
                  config: list[str], autotune_config: int, launch: str | None, tensor: list[str], arg: list[str],
                  size: list[str], site: str | None, k_dir: str = "forward", wave_sync: bool = False,
                  inputs: str | None = None, simulates: bool = True) -> Any:
    """Open the kernel file, say what was chosen (site lines, config, launcher), trace it: its Scenario.
    `simulates`: False for commands that predict nothing (eval, check), which need no occupancy."""
    from swizzlelab.hw import resolve_target

    if k_dir != "forward":
        raise UserError("--k-dir applies to task kernels with a K-direction switch, not to a --kernel file")
    if wave_sync:
        raise UserError("--wave-sync applies to task kernels with a barrier between waves, not to a --kernel file")
    from swizzlelab.scenario import scenario_from_user_kernel

    resolved = resolve_target(target)
    user_kernel = open_from_options(
        kernel, resolved.model, task=task, config=config, autotune_config=autotune_config, launch=launch,
        tensor=tensor, arg=arg, size=size, site=site, inputs=inputs,
    )
    for line in user_kernel.describe():
        out_console.print(line, highlight=False)
    out_console.print(f"trace method: {user_kernel.trace_method}", highlight=False)
    scenario = scenario_from_user_kernel(user_kernel, resolved, occupancy if simulates else occupancy or 1)
    out_console.print(user_kernel.trace().describe(), highlight=False)
    if simulates:
        out_console.print(scenario.occupancy.text(), highlight=False)
    return scenario


# Options every command that accepts a kernel file as people write it declares (typer reads them as defaults).
KERNEL_HELP = "a kernel file as written (FILE or FILE:KERNEL): driver queries, @triton.autotune and a wrapper that launches it are fine"


def kernel_opt() -> Any:
    return typer.Option(None, "--kernel", help=KERNEL_HELP)


def config_opt() -> Any:
    return typer.Option([], "--config", help=CONFIG_HELP)


def autotune_opt() -> Any:
    return typer.Option(0, "--autotune-config", help=AUTOTUNE_HELP)


def launch_opt() -> Any:
    return typer.Option(None, "--launch", help=LAUNCH_HELP)


def tensor_opt() -> Any:
    return typer.Option([], "--tensor", help=TENSOR_HELP)


def arg_opt() -> Any:
    return typer.Option([], "--arg", help=ARG_HELP)


def site_opt() -> Any:
    return typer.Option(None, "--site", help=SITE_HELP)


def inputs_opt() -> Any:
    return typer.Option(None, "--inputs", help=INPUTS_HELP)


def eval_user_kernel(scenario: Any, order: str | None, outputs: tuple[str, ...] | None, mode: str,
                     budget_s: float, out_console: Any) -> bool:
    """`eval --kernel FILE --order X`: test (same output as the kernel's own order, CPU or GPU) or benchmark
    (interleaved timing with a 95% CI, GPU only). True when it passed."""
    from swizzlelab.errors import NoGpuError
    from swizzlelab.runtime import device

    task = scenario.task
    formula = scenario.parse_order(order, outputs=outputs) if order else None
    data = task.generate_input(scenario.case)
    where = "measured (" + _gpu_name() + ")" if device() == "cuda" else "the CPU interpreter"
    label = order or "the kernel's own order"
    output = task.custom_kernel(data, formula)
    verdict = task.check(data, output)
    out_console.print(f"test: order {label} on {task.case_label(scenario.case)} ({where}): "
                      f"{'passed' if verdict.ok else 'FAILED'}: {verdict.message}", highlight=False)
    if not verdict.ok or mode == "test":
        return verdict.ok
    if mode != "benchmark":
        raise UserError(f"--mode {mode} with --kernel: use test or benchmark")
    if device() != "cuda":
        raise NoGpuError("--mode benchmark needs a CUDA GPU; run --mode test on the CPU")
    from swizzlelab.harness import compare_interleaved

    comparison = compare_interleaved(lambda d: task.custom_kernel(d, None), lambda d: task.custom_kernel(d, formula),
                                     data, budget_s=budget_s, poison=False)
    out_console.print(
        f"benchmark: own order {comparison.a.mean_ms:.4f} ms, {label} {comparison.b.mean_ms:.4f} ms: speedup "
        f"{comparison.speedup:.4f}x [95% CI {comparison.ci_low:.4f}, {comparison.ci_high:.4f}] over "
        f"{comparison.a.n} interleaved pairs, measured ({_gpu_name()})", highlight=False)
    return True


def _gpu_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))
