"""The sandboxed child of a suggestion (swizzlelab.optimize.suggest): opens the submission as a kernel file, reads
its compiled resources ("resources") or traces it at a benchmark case and ranks orders with the time model ("rank").

Started by harness.isolate's ChildProcess with this module as its entry (the evaluator's BOOT: jail, early limits;
this file is loaded alone, so importing it runs no package __init__): torch and CUDA start before the late sandbox
stage, the simulator loads after it, the submission last. One frame in, one
JSON frame out; the parent validates every field of it.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from swizzlelab.harness.isolate import protocol

MAX_ORDERS = 20  # orders sent back, best predicted first


def _one_line(err: BaseException) -> str:
    from swizzlelab.errors import UserError

    if isinstance(err, UserError):
        return (str(err).strip().splitlines() or [type(err).__name__])[0][:600]
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "swizzlelab" not in f.filename]
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    text = (f"{type(err).__name__}: {err}".strip().splitlines() or [type(err).__name__])[0]
    return text[:400] + where


def _unstub() -> None:
    """Drop the BOOT's bare stand-ins for swizzlelab.harness(.isolate) (packages without their __init__), so what
    imports them from here on gets the real packages."""
    for name in ("swizzlelab.harness.isolate", "swizzlelab.harness"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None) is None:
            del sys.modules[name]


def _trusted_start() -> None:
    """What needs the privileges the late sandbox stage takes away: Triton in the mode the parent chose (compiled
    must be imported before swizzlelab picks a backend), torch, and CUDA where there is a GPU. The simulator is
    imported after that stage (its numba caches are then made by the uid that writes them) and before the
    submission."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        import triton  # noqa: F401

    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()


def _opened(msg: dict[str, Any], case: dict[str, Any], interpret: bool | None) -> tuple[Any, Any]:
    """(user kernel, target) of the submission at one benchmark case, launched through its custom_kernel(data)."""
    from swizzlelab.hw import resolve_target
    from swizzlelab.tasks import load_task
    from swizzlelab.userkernel import Inputs, open_user_kernel

    task = load_task(msg["task"])
    target = resolve_target(msg["target"])
    inputs = Inputs(sizes={str(k): int(v) for k, v in case["sizes"].items()}, seed=int(case["seed"]), task=task)
    kernel = open_user_kernel(msg["path"], target.model, launch="custom_kernel", inputs=inputs, interpret=interpret)
    return kernel, target


def _resources(msg: dict[str, Any]) -> dict[str, Any]:
    """The compiled kernel's registers, shared memory and warps at the first case: run on the GPU here, else
    compiled for sm_90."""
    from swizzlelab.errors import UserError
    from swizzlelab.hw import local_gpu_name
    from swizzlelab.userkernel.resources import from_compiled, kernel_resources
    from swizzlelab.userkernel.shim import gpu_present

    kernel, target = _opened(msg, msg["cases"][0], interpret=False)
    if gpu_present():
        found, why = kernel_resources(kernel, local_gpu_name(), target.model)
    else:
        found, why = from_compiled(kernel.launcher.warmup(), "compiled for sm_90 here, without a GPU"), \
            "the compiler gave no register count"
    if found is None:
        raise UserError(why)
    return {"resources": {**found.as_dict(), "how": found.how}}


def _searched(msg: dict[str, Any], index: int, resources: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """Trace the kernel at case `index` and run the optimizer's search there with the time model (anchored on
    the leaderboard's measurement of the submission's own order when one is given; nothing is measured here).
    Returns (kernel, scenario, run result, what the case report says)."""
    from swizzlelab.optimize.loop import run
    from swizzlelab.optimize.state import Options
    from swizzlelab.scenario import Occupancy, scenario_from_user_kernel

    case = msg["cases"][index]
    kernel, target = _opened(msg, case, interpret=True)
    kernel.max_interpret_s = float(msg["interpret_s"])  # a trace that cannot be derived must still fit the child
    scenario = scenario_from_user_kernel(kernel, target, occupancy=None if resources else 1, resources=resources)
    if resources is None:
        scenario.occupancy = Occupancy(1, "assumed: the compiled kernel's resources could not be read")
    anchor = (float(case["anchor"][0]), str(case["anchor"][1])) if case.get("anchor") else None
    options = Options(out_dir=Path(os.environ.get("TMPDIR", ".")) / "suggest" / f"case{index}",
                      budget=int(msg["top"]), screen_s=float(msg["screen_s"]) / len(msg["cases"]), use_ncu=False,
                      sim_engine=str(msg["sim_engine"]), anchor=anchor, command="leaderboard suggestion",
                      report_untried=int(msg.get("sweep", 0)))
    result = run(scenario, options, measurer=None)
    state = result.state
    model = state.time_model
    about = {"case": case["label"], "grid": list(scenario.grid), "trace": kernel.trace().describe(),
             "occupancy": scenario.occupancy.text(),
             "time_model": next((n for n in state.notes if n.startswith("time model")), ""),
             "anchor": model.anchor if model is not None else "", "stop_reason": result.stop_reason,
             "search": [n for n in state.notes if n.startswith("search")],
             "noise": model.cal.noise if model is not None else 0.0}
    return kernel, scenario, result, about


def _figures(state: Any, formula: str, spec: str) -> tuple[Any, str]:
    """(the order's attempt in this case's run, evaluated now if the run did not propose it, or None; why not)."""
    from swizzlelab.optimize.loop import evaluate
    from swizzlelab.optimize.measure import MeasureCache
    from swizzlelab.optimize.records import DUPLICATE, EVALUATED, Proposal

    for attempt in state.attempts[1:]:
        if attempt.formula == formula and attempt.status == EVALUATED:
            return attempt, ""
    proposal = Proposal(formula_text=formula, hypothesis="proposed for another benchmark case", proposer="search",
                        label=spec)
    # nothing is measured here: the cache stays empty and unwritten
    attempt = evaluate(state, state.next_iteration(), proposal, None, MeasureCache.open(state.options.out_dir / "none"))
    if attempt.status == DUPLICATE:
        attempt = next(a for a in state.attempts if a.iteration == attempt.duplicate_of)
    if attempt.status != EVALUATED or attempt.time is None:
        return None, attempt.message or attempt.status
    return attempt, ""


def _rank(msg: dict[str, Any]) -> dict[str, Any]:
    """Search every asked benchmark case, then predict each order any case proposed on every case: its score's
    predicted speedup is the geometric mean of the cases' (as the leaderboard ranks), its interval the cases'
    bounds combined alike (their errors taken as fully correlated: the same model made them all)."""
    from swizzlelab.optimize.records import EVALUATED
    from swizzlelab.userkernel.resources import Resources

    started = time.perf_counter()
    found = msg.get("resources")
    resources = Resources(**found) if found else None
    searched = [_searched(msg, index, resources) for index in range(len(msg["cases"]))]
    kernel, first_scenario = searched[0][0], searched[0][1]
    proposed: dict[str, str] = {}  # formula -> family spec, first proposer first
    for _, _, result, _ in searched:
        for attempt in result.state.attempts[1:]:
            if attempt.status == EVALUATED and attempt.time is not None:
                proposed.setdefault(attempt.formula, attempt.label)
    # A case the time model stopped still names its best untried order: on a GPU it may be timed anyway
    for _, _, result, _ in searched:
        for formula, spec in result.next_untried:
            proposed.setdefault(formula, spec)
    orders = []
    for formula, spec in proposed.items():
        per_case, proofs, why = [], [], ""
        for _, _, result, about in searched:
            attempt, why = _figures(result.state, formula, spec)
            if attempt is None:
                why = f"{about['case']}: {why}"
                break
            per_case.append({"case": about["case"], "speedup": attempt.time.speedup, "low": attempt.time.low,
                             "high": attempt.time.high, "dram_bytes": float(attempt.prediction.dram_bytes)})
            proofs.append(attempt.proof.message if attempt.proof else "")
        if why:
            continue  # not an order of every case (e.g. no bijection on another case's grid): not suggested
        mean = {key: math.exp(sum(math.log(c[key]) for c in per_case) / len(per_case))
                for key in ("speedup", "low", "high")}
        orders.append({"spec": spec, "formula": formula, "proof": "; ".join(dict.fromkeys(proofs)),
                       **mean, "cases": per_case,
                       "patched": kernel.file_source(first_scenario.formula(formula))})
    orders.sort(key=lambda o: -o["speedup"])
    first = searched[0][3]
    return {"ranking": {
        "kernel": kernel.name, "site": kernel.site_lines() + (f" ({kernel.site.how})" if kernel.site.how else ""),
        "model": first_scenario.model.name, "noise": first["noise"],
        "cases": [about for _, _, _, about in searched], "orders": orders[:MAX_ORDERS],
        "elapsed_s": time.perf_counter() - started,
    }}


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"resources": _resources, "rank": _rank}


def main(in_fd: int, out_fd: int, sandbox: dict[str, Any], lock_down: Callable[[], dict[str, Any]],
         fd_socket: int | None = None) -> None:
    """Answer one frame, then exit; whatever the submission does, the answer is one JSON frame or none."""
    reply: dict[str, Any]
    try:
        msg = protocol.recv(in_fd)
        op = OPS.get(str(msg.get("op")))
        if op is None:
            raise ValueError(f"unknown op {msg.get('op')!r}")
        _trusted_start()
        late = lock_down()
        _unstub()
        boxed = {key: sandbox.get(key, []) + late.get(key, []) for key in ("applied", "skipped")}
        reply = {"ok": True, "sandbox": boxed, **op(msg)}
    except BaseException as err:  # SystemExit from the submission included: a failed suggestion, one line
        reply = {"ok": False, "error": _one_line(err)}
    try:
        protocol.send(out_fd, reply)
    except (OSError, TypeError, ValueError) as err:
        protocol.send(out_fd, {"ok": False, "error": f"the answer could not be sent: {_one_line(err)}"})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)
