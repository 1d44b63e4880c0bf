"""CLI options shared by the commands that accept a kernel file as people write it (--kernel FILE[:KERNEL]):
turn --config/--autotune-config/--launch/--tensor/--arg/--inputs/--size into a swizzlelab.userkernel.UserKernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import typer

from swizzlelab.errors import UserError

CONFIG_HELP = "constexprs/launch options forced on the kernel, e.g. BLOCK_SIZE_M=128,GROUP_SIZE_M=8,num_warps=8 (default: an autotuned kernel's config as --autotune-config says, else the launch's own)"
AUTOTUNE_HELP = "which @triton.autotune config to run (0-based; printed). Default: on a GPU, for commands that time the kernel (optimize, eval --mode benchmark), the one the kernel's own @triton.autotune picks at these inputs; else the first"
LAUNCH_HELP = "the wrapper that launches the kernel: FUNCTION of the kernel file, FILE.py:FUNCTION or module:function (default: the file's one function that launches it)"
TENSOR_HELP = "an input of the wrapper: NAME=DTYPE[DIM,...], dims numbers or --size names, e.g. a=float16[M,K]; a list of tensors as NAME=[DTYPE[DIM,...],...]"
INPUTS_HELP = "FILE.py:FUNCTION returning the wrapper's arguments as a dict (for inputs with structure, e.g. MoE routing); its parameters are filled from --size, seed and device"
SITE_HELP = "file lines of the remap block to take as the swizzle site, A-B (default: found automatically)"
ARG_HELP = "a scalar input of the wrapper: NAME=VALUE, e.g. sm_scale=0.125"


@dataclass(frozen=True)
class KernelOptions:
    """How to open and launch a kernel file as people write it: --config, --autotune-config, --launch, --tensor,
    --arg, --size, --site, --inputs, and the task whose generate_input makes the wrapper's inputs. `own_autotune`:
    the command times the kernel, so without --config/--autotune-config an autotuned kernel on a GPU runs the
    config its own @triton.autotune picks (commands that only predict keep the first: no autotuning wait)."""

    task: str | None = None
    config: list[str] = field(default_factory=list)
    autotune_config: int | None = None
    launch: str | None = None
    tensor: list[str] = field(default_factory=list)
    arg: list[str] = field(default_factory=list)
    size: list[str] = field(default_factory=list)
    site: str | None = None
    inputs: str | None = None
    seed: int = 0
    own_autotune: bool = False


@dataclass(frozen=True)
class KernelOption:
    """--kernel FILE[:KERNEL] imported once (userkernel.load_kernel_file) for the target the command runs on:
    a task kernel module (`kfile.is_task_kernel`: a task scenario takes it) or a file as people write it (traced
    through its wrapper: user_scenario)."""

    spec: str
    kfile: Any  # swizzlelab.userkernel.KernelFile
    target: Any  # swizzlelab.hw.Target

    @property
    def is_task_kernel(self) -> bool:
        return bool(self.kfile.is_task_kernel)


def load_kernel_option(kernel: str | None, target: str | Any) -> KernelOption | None:
    """The --kernel file imported for `target` (a --target name or a resolved Target); None without --kernel."""
    if not kernel:
        return None
    from swizzlelab.hw import Target, resolve_target
    from swizzlelab.userkernel import load_kernel_file, split_kernel_spec

    resolved = target if isinstance(target, Target) else resolve_target(target)
    return KernelOption(kernel, load_kernel_file(split_kernel_spec(kernel)[0], resolved.model), resolved)


def parse_sizes(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip() or not raw.strip().isdigit() or int(raw) < 1:
            raise UserError(f"--size {item!r}: write NAME=N with N >= 1, e.g. --size M=4096")
        out[name.strip()] = int(raw)
    return out


def open_from_options(kernel: str, target_model: Any, options: KernelOptions, kfile: Any = None) -> Any:
    """The UserKernel the options describe. The wrapper's inputs: the task's generate_input on its first benchmark
    case (--size overrides the case's sizes) and/or an --inputs function, overlaid by --tensor and --arg. `kfile`:
    the file already imported for `target_model` (load_kernel_option), else it is imported here."""
    from swizzlelab.userkernel import Inputs, open_user_kernel, parse_config_option, parse_scalar, parse_tensor_spec

    overrides = parse_config_option(options.config)
    sizes = parse_sizes(options.size)
    seed = options.seed
    loaded = None
    if options.task:
        from swizzlelab.scenario import apply_sizes, pick_case
        from swizzlelab.tasks import load_task

        loaded = load_task(options.task)
        case = pick_case(loaded, None)
        # sizes the task's case has set its case; the others (tensor dims) are the tensors' own
        case = apply_sizes([item for item in options.size if item.partition("=")[0].strip() in case], case)
        seed = int(case.get("seed", seed))
        sizes = {**{k: v for k, v in case.items() if k != "seed"}, **sizes}
    given = Inputs(tuple(parse_tensor_spec(t) for t in options.tensor), dict(parse_scalar(a) for a in options.arg),
                   sizes, seed, loaded, options.inputs)
    return open_user_kernel(kernel, target_model, config=overrides, autotune_index=options.autotune_config,
                            launch=options.launch, inputs=given, site=options.site, kfile=kfile,
                            own_autotune=options.own_autotune)


def user_scenario(out_console: Any, kernel: str | KernelOption, options: KernelOptions, *, target: str | Any,
                  occupancy: int | None, k_dir: str = "forward", wave_sync: bool = False,
                  simulates: bool = True) -> Any:
    """Open the kernel file (`kernel`: --kernel's text, or the file load_kernel_option imported, whose target
    wins), say what was chosen (site lines, config, launcher), trace it: its Scenario. `simulates`: False for
    commands that predict nothing (eval, check), which need no occupancy."""
    if k_dir != "forward":
        raise UserError("--k-dir applies to task kernels with a K-direction switch, not to a --kernel file")
    if wave_sync:
        raise UserError("--wave-sync applies to task kernels with a barrier between waves, not to a --kernel file")
    from swizzlelab.scenario import scenario_from_user_kernel

    opened = kernel if isinstance(kernel, KernelOption) else load_kernel_option(kernel, target)
    if opened is None:
        raise UserError("give the kernel file with --kernel FILE[:KERNEL]")
    resolved = opened.target
    user_kernel = open_from_options(opened.spec, resolved.model, options, kfile=opened.kfile)
    for line in user_kernel.describe():
        out_console.print(line, highlight=False)
    scenario = scenario_from_user_kernel(user_kernel, resolved, occupancy if simulates else occupancy or 1)
    out_console.print(user_kernel.trace().describe(), highlight=False)
    # after the trace: the line then says whether it was derived from a sample or every program was interpreted
    out_console.print(f"trace method: {user_kernel.trace_method}", highlight=False)
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
    return typer.Option(None, "--autotune-config", help=AUTOTUNE_HELP)


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
    from swizzlelab.harness import TimingOptions, compare_interleaved

    comparison = compare_interleaved(lambda d: task.custom_kernel(d, None), lambda d: task.custom_kernel(d, formula),
                                     data, budget_s=budget_s, options=TimingOptions(poison=False))
    out_console.print(
        f"benchmark: own order {comparison.a.mean_ms:.4f} ms, {label} {comparison.b.mean_ms:.4f} ms: speedup "
        f"{comparison.speedup:.4f}x [95% CI {comparison.ci_low:.4f}, {comparison.ci_high:.4f}] over "
        f"{comparison.a.n} interleaved pairs, measured ({_gpu_name()})", highlight=False)
    return True


def _gpu_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))
