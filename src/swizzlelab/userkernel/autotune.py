"""Which @triton.autotune config a user kernel runs with: on a GPU, the one its own autotuner picks, found by
running the user's wrapper once on the real inputs with the file's Autotuner in place; the first elsewhere.

Triton's own autotuning runs (its benchmarker, the configs' pre_hooks, reset_to_zero/restore_value,
prune_configs_by), so the config is the one the user's first call at these inputs gets. It is chosen once per
opened kernel: every order is then launched, traced and measured at that config (config.choose forces it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.hw.targets import local_gpu_name
from swizzlelab.userkernel.load import FoundKernel
from swizzlelab.userkernel.shim import gpu_present

OTHERS = "choose others with --config/--autotune-config"
GIVEN = f" (given with --autotune-config; {OTHERS})"
ON_CPU = f" (the first: autotuning needs a GPU; {OTHERS})"
UNTIMED = f" (the first: this command times nothing, so the kernel's @triton.autotune is not run; {OTHERS})"
WITH_CONFIG = f" (the first: with --config the kernel's @triton.autotune is not run; {OTHERS})"
# past this, the line says that the user's own first call at these inputs waits as long
LONG_S = 10.0


@dataclass(frozen=True)
class Tuned:
    """The autotune config index to run with and `why`, the text following it in the config line."""

    index: int
    why: str
    seconds: float | None = None  # measured wall time of the kernel's own autotuning


def index_for(kernel: FoundKernel, given: int | None, overridden: bool, own: bool,
              run_wrapper: Callable[[], Any], wrapper_name: str = "the wrapper") -> Tuned:
    """The config index for `kernel`: `given` (--autotune-config) when set; else, for an autotuned kernel compiled
    on a GPU with no --config (`overridden`) and a command that times it (`own`), the one its @triton.autotune
    picks when `run_wrapper()` launches it; else the first, saying why."""
    if given is not None:
        return Tuned(given, GIVEN)
    if not kernel.autotune_configs:
        return Tuned(0, "")
    if overridden:
        return Tuned(0, WITH_CONFIG)
    if kernel.interpreted or not gpu_present():
        return Tuned(0, ON_CPU)
    if not own:
        return Tuned(0, UNTIMED)
    return own_pick(kernel, run_wrapper, wrapper_name)


def _autotuner(attr: Any) -> Any:
    """The Autotuner among the kernel's wrappers (outermost first, e.g. Heuristics > Autotuner > JITFunction)."""
    current = attr
    for _ in range(8):
        if current is None:
            return None
        if hasattr(current, "configs") and hasattr(current, "cache") and hasattr(current, "prune_configs"):
            return current
        current = getattr(current, "fn", None)
    return None


def _programs(tuner: Any, args: tuple, kwargs: dict[str, Any], config: Any) -> int:
    """Programs of one launch through the autotuner (its grid may be a function of the chosen config's values)."""
    grid = kwargs.get("grid")
    if callable(grid):
        try:
            grid = grid({**dict(zip(tuner.arg_names, args)), **kwargs, **config.all_kwargs()})
        except Exception:  # noqa: BLE001 - a grid the launch itself evaluated; only the ranking needs it here
            return 0
    n = 1
    for dim in (grid if isinstance(grid, (tuple, list)) else (grid,)):
        try:
            n *= int(dim)  # ints, numpy and 0-d torch integers alike
        except (TypeError, ValueError):
            return 0
    return n


def _index_of(config: Any, configs: list[Any]) -> int | None:
    """Where `config` sits among the autotuner's configs: itself, else the one with the same values (Triton's disk
    cache and a prune function may hand back copies)."""
    for i, candidate in enumerate(configs):
        if candidate is config:
            return i
    for i, candidate in enumerate(configs):
        if candidate.all_kwargs() == config.all_kwargs():
            return i
    return None


def own_pick(kernel: FoundKernel, run_wrapper: Callable[[], Any], wrapper_name: str = "the wrapper") -> Tuned:
    """Run the wrapper once with the kernel's own Autotuner in place and read the config it picked for the launch
    swizzlelab traces (the one with the most programs, the last of equals, as user_trace picks it); the first
    config, saying why, when that cannot be done."""
    import torch

    tuner = _autotuner(kernel.attr)
    if tuner is None:
        return Tuned(0, f" (the first: no Autotuner found around {kernel.name}; {OTHERS})")
    launches: list[tuple[int, Any]] = []  # (programs, config picked) per launch through the autotuner
    own_run = tuner.run

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = own_run(*args, **kwargs)
        launches.append((_programs(tuner, args, kwargs, tuner.best_config), tuner.best_config))
        return out

    # an instance attribute: Heuristics and KernelInterface call `.run` on the object, so it goes through here
    had_own = "run" in vars(tuner)
    tuner.run = recording
    start = time.perf_counter()
    try:
        run_wrapper()
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the seconds include the launch's own run
    except Exception as err:  # noqa: BLE001 - the user's wrapper; the reason goes into the config line
        first = (str(err).splitlines() or [""])[0][:160]
        return Tuned(0, f" (the first: running {wrapper_name} with its @triton.autotune failed: "
                        f"{type(err).__name__}: {first}; {OTHERS})")
    finally:
        if had_own:
            tuner.run = own_run
        else:
            del tuner.run
    seconds = time.perf_counter() - start
    if not launches:
        return Tuned(0, f" (the first: {wrapper_name} launched {kernel.name} through no @triton.autotune; {OTHERS})")
    config = max(enumerate(launches), key=lambda item: (item[1][0], item[0]))[1][1]
    index = _index_of(config, list(tuner.configs))
    if index is None:
        return Tuned(0, f" (the first: the kernel's @triton.autotune picked a config outside its list ({config}); "
                        f"{OTHERS})")
    return Tuned(index, _measured_why(tuner, len(kernel.autotune_configs), seconds), seconds)


def _measured_why(tuner: Any, n_configs: int, seconds: float) -> str:
    timings = getattr(tuner, "configs_timings", None) or {}
    failed = sum(1 for t in timings.values() if float(t[0] if isinstance(t, (list, tuple)) else t) == float("inf"))
    timed = f"; {len(timings)} of {n_configs} configs timed" if timings else ""
    failed_text = f", {failed} did not compile" if failed else ""
    pays = "; the kernel's own first call at these inputs takes as long" if seconds >= LONG_S else ""
    return (f": chosen by the kernel's @triton.autotune on {local_gpu_name() or 'the CPU (Triton interpreter)'} in {seconds:.1f} s "
            f"(measured{timed}{failed_text}{pays}; {OTHERS})")


def fitting(kernel: FoundKernel, tuned: Tuned, overridden: bool, given: int | None,
            shared: Callable[[int], tuple[int, int]]) -> Tuned:
    """`tuned` where its config fits the GPU's shared memory; else, where swizzlelab chose it (not --config, not
    --autotune-config), the next autotune config that fits, the skipped ones said in one line as Triton's own
    autotuner skips them; UserError where none fits or the user chose it. `shared(index)`: (bytes the compiled
    config needs, bytes the GPU has)."""
    need, limit = shared(tuned.index)
    if need <= limit:
        return tuned
    label = kernel.autotune_configs[tuned.index].label() if kernel.autotune_configs else "the launch's"
    if overridden or given is not None or not kernel.autotune_configs:
        chosen = "--config" if overridden else f"--autotune-config {given}" if given is not None else "the launch's config"
        raise UserError(f"{kernel.name} at {chosen} ({label}) needs {need} B of shared memory and this GPU has {limit} B: "
                        "it cannot launch here; choose smaller blocks or fewer stages with --config")
    skipped = [f"config {tuned.index} ({need} B)"]
    for index in range(tuned.index + 1, len(kernel.autotune_configs)):
        need_next, _ = shared(index)
        if need_next <= limit:
            why = (f" (config{'s' if len(skipped) > 1 else ''} {', '.join(skipped)} need more shared memory than this "
                   f"GPU's {limit} B: skipped, as Triton's autotuner skips them; {OTHERS})")
            return Tuned(index, why, tuned.seconds)
        skipped.append(f"config {index} ({need_next} B)")
    raise UserError(f"{kernel.name}: none of its autotune configs from {tuned.index} on fits this GPU's {limit} B of "
                    f"shared memory ({', '.join(skipped)})")
