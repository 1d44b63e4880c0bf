"""Outputs of an optimize run: log.txt, report.json, a self-contained report.html (plots as base64 PNGs) and
best_kernel.py (the kernel module with the best formula spliced in). All written atomically.
"""

from __future__ import annotations

import base64
import html
import inspect
import io
import json
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np  # noqa: E402

from swizzlelab.fmt import fmt_bytes, grid_text, pct  # noqa: E402
from swizzlelab.hw import launch_domains  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.optimize.logtext import render_header, render_iteration  # noqa: E402
from swizzlelab.optimize.records import EVALUATED, Attempt  # noqa: E402
from swizzlelab.optimize.state import JSONL, RunState, describe_best  # noqa: E402
from swizzlelab.sim.agreement import RESOLUTION_TEXT, within_resolution  # noqa: E402
from swizzlelab.swizzle import emit_triton, find_site  # noqa: E402


def log_text(state: RunState) -> str:
    header = render_header(state.scenario, state.baseline, state.notes)
    if state.options.proposer != "search":
        # What the LLM was told about memory, once for every iteration below (its prompt carries the same).
        header += "Memory analysis (from the access trace):\n" + state.memory_text() + "\n\n"
    note = state.measured_note or f"measured on {state.device}"
    return header + "".join(render_iteration(a, state.baseline, note) for a in state.attempts[1:])


def separation(state: RunState) -> tuple[bool | None, str]:
    """Whether the simulator told the orders it predicted apart: some order's predicted DRAM reads or L2 hit rate
    lie beyond the model's resolution from the kernel's own order's (None when nothing was predicted), with the
    line saying so. At a size whose inputs fit in L2 every order reads the same bytes at the same hit rate."""
    base = state.baseline.prediction if state.attempts else None
    predictions = [p for p, _ in state.predictions.values()]
    if base is None or not predictions:
        return None, "no order was predicted: nothing to tell apart"
    reads = [p.dram_read_bytes for p in predictions]
    hits = [p.l2_hit_rate for p in predictions]
    spread = (f"{len(predictions)} order(s) simulated, DRAM read {fmt_bytes(min(reads))} to {fmt_bytes(max(reads))}, "
              f"L2 hit {pct(min(hits))} to {pct(max(hits))}; the kernel's own order {fmt_bytes(base.dram_read_bytes)}, "
              f"{pct(base.l2_hit_rate)} (predicted, model {base.model})")
    if any(not within_resolution(p.dram_read_bytes, base.dram_read_bytes, 100 * p.l2_hit_rate,
                                 100 * base.l2_hit_rate) for p in predictions):
        return True, f"the predictions separate the orders: {spread}"
    return False, (f"the predictions do not separate the orders: {spread}; every one {RESOLUTION_TEXT} of the "
                   "kernel's own, so only a measurement can order them")


def report_dict(state: RunState) -> dict[str, Any]:
    scenario = state.scenario
    best = state.best()
    counts: dict[str, int] = {}
    for a in state.attempts[1:]:
        counts[a.status] = counts.get(a.status, 0) + 1
    separates, separation_line = separation(state)
    return {
        "task": scenario.task.name,
        "case": scenario.case,
        "grid": list(scenario.grid),
        "kernel": {"path": str(scenario.kernel.path), "name": scenario.kernel.name, "hash": scenario.kernel.source_hash},
        "target": {"model": scenario.target.model.name, "note": scenario.target.note,
                   "source": scenario.target.model.source},
        "occupancy": scenario.occupancy.programs,
        "occupancy_source": scenario.occupancy.source,
        "device": state.device or None,
        "measured": bool(state.device),
        "labels": {
            "prediction": f"predicted (model {scenario.target.model.name})",
            "measurement": f"measured ({state.device})" if state.device else "nothing measured: " + state.measured_note,
        },
        "command": state.options.command,
        "proposer": state.options.proposer,
        "budget": state.options.budget,
        "notes": list(state.notes),
        "timeline_s": [{"what": what, "s": round(seconds, 3)} for what, seconds in state.timeline],
        "status_counts": counts,
        "baseline": state.baseline.to_dict(),
        "best": {"iteration": best.iteration, "permutation_id": best.permutation_id, "label": best.label,
                 "formula": best.formula, "summary": describe_best(state)},
        "prediction_separates_orders": separates,
        "separation": separation_line,
        "iterations": [a.to_dict() for a in state.attempts],
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_progress(state: RunState) -> None:
    """After every iteration: the text log and the JSON report (cheap; the HTML waits for the end)."""
    out = state.options.out_dir
    atomic_write_text(out / "log.txt", log_text(state))
    atomic_write_text(out / "report.json", json.dumps(report_dict(state), indent=1, default=float))


def write_all(state: RunState) -> dict[str, Path]:
    out = state.options.out_dir
    write_progress(state)
    files = {"log": out / "log.txt", "jsonl": out / JSONL, "report_json": out / "report.json"}
    files["report_html"] = atomic_write_text(out / "report.html", render_html(state))
    best_file = write_best_kernel(state)
    if best_file is not None:
        files["best_kernel"] = best_file
    return files


# ---------------------------------------------------------------------------------------------- best kernel


def best_kernel_source(scenario: Any, formula_text: str, header: str) -> str:
    """The kernel's module source with `formula_text` at its swizzle site (validated by the splicer). A kernel
    file as people write it comes back as written, with only its site (and the site's twins) replaced."""
    formula = scenario.formula(formula_text)
    user_kernel = getattr(scenario.task, "user_kernel", None)
    if user_kernel is not None:
        return header + user_kernel.file_source(formula)
    fn = getattr(scenario.kernel.jit_fn, "fn", scenario.kernel.jit_fn)
    fn_lines, first_line = inspect.getsourcelines(fn)
    source = "".join(fn_lines)
    site = find_site(textwrap.dedent(source), scenario.kernel.name)
    module_lines = scenario.kernel.module_source.splitlines()
    start = first_line - 1 + site.start
    stop = first_line - 1 + site.stop
    # The site's indentation in the file (dedent removed the function's own indentation, if any).
    indent = module_lines[start][: len(module_lines[start]) - len(module_lines[start].lstrip())] if start < stop else site.indent
    body = emit_triton(formula, indent=indent).rstrip("\n").splitlines()
    new_lines = module_lines[:start] + body + module_lines[stop:]
    return header + "\n".join(new_lines) + "\n"


def write_best_kernel(state: RunState) -> Path | None:
    best = state.best()
    scenario = state.scenario
    pred = best.prediction
    lines = [
        "# Generated by `swizzlelab optimize`: the kernel below carries the best order found at its swizzle site.",
        (
            f"# task {scenario.task.name} ({scenario.sizes_label()}), grid {grid_text(scenario.grid)}, "
            f"from {scenario.kernel.path}"
        ),
        f"# iteration {best.iteration} ({best.label}), permutation id {best.permutation_id}",
        (
            f"# predicted (model {scenario.model.name}): L2 hit {pct(pred.l2_hit_rate if pred else None)}, DRAM "
            f"read {fmt_bytes(pred.dram_read_bytes if pred else 0)}"
        ),
    ]
    choice = getattr(getattr(scenario.task, "user_kernel", None), "choice", None)
    if choice is not None and choice.config_index is not None:
        # the file keeps its @triton.autotune: elsewhere (another GPU, other sizes) it may pick another config
        lines.append(f"# orders compared at {choice.source}")
    if scenario.k_wave:
        lines.append(
            f"# found with K alternating (--k-dir alternate: odd waves of {scenario.k_wave} launches walk K backwards):"
            " launch it so, e.g. custom_kernel(data, config=with_k_alternation(GPU_CONFIG))"
        )
    if scenario.wave_sync:
        lines.append(
            f"# found with a barrier between waves (--wave-sync: each wave of {scenario.wave_sync} launches starts once"
            " the previous one has finished): launch it so, e.g. config=with_wave_sync(GPU_CONFIG)"
        )
    comparison = best.comparison
    if comparison is not None:
        lines.append(
            f"# measured ({best.measurement.device}): {comparison.ci_text()} vs the kernel's default order"
        )
    elif state.device:
        lines.append(f"# measured ({state.device}): no order beat the default with 95% confidence")
    else:
        lines.append("# nothing measured (no target GPU here): the choice rests on the simulator's prediction")
    source = best_kernel_source(scenario, best.formula, "\n".join(lines) + "\n")
    return atomic_write_text(state.options.out_dir / "best_kernel.py", source)


# ---------------------------------------------------------------------------------------------- HTML


def _pyplot() -> Any:
    """matplotlib's pyplot, imported when the first plot is drawn: on a fresh installation its import builds a
    font cache (measured 15-45 s on a GPU host), which must not delay the optimizer's first measurement."""
    import matplotlib

    matplotlib.use("Agg")  # reports are files: never open a window
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _plots(state: RunState) -> list[tuple[str, str]]:
    plt = _pyplot()
    model = state.scenario.model.name
    evaluated = [a for a in state.attempts if a.status == EVALUATED and a.prediction is not None]
    its = [a.iteration for a in evaluated]
    out = []

    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(its, [100 * a.prediction.l2_hit_rate for a in evaluated], "o-", label=f"predicted (model {model})")
    measured = [(a.iteration, a.ncu.l2_hit_rate_pct) for a in evaluated
                if a.ncu is not None and a.ncu.l2_hit_rate_pct is not None]
    if measured:
        ax.plot(*zip(*measured), "s", label=f"measured ({state.device}, ncu)")
    ax.set_xlabel("iteration (0 = kernel's own order)")
    ax.set_ylabel("L2 hit rate %")
    ax.legend()
    ax.grid(alpha=0.3)
    out.append(("L2 hit rate per iteration", _png(fig)))

    fig, ax = plt.subplots(figsize=(7, 3.2))
    timed = [(a.iteration, a.comparison) for a in evaluated if a.comparison is not None]
    if timed:
        ax.errorbar(
            [i for i, _ in timed], [c.candidate_ms for _, c in timed],
            yerr=[1.96 * c.candidate_sem_ms for _, c in timed], fmt="o", label="order (95% CI)",
        )
        ax.plot([i for i, _ in timed], [c.baseline_ms for _, c in timed], "x", label="default order, interleaved")
        ax.set_ylabel(f"time ms, measured ({state.device})")
        title = "Time per iteration (measured)"
    else:
        ax.plot(its, [a.prediction.dram_read_bytes / 1e6 for a in evaluated], "o-")
        ax.set_ylabel(f"DRAM read MB, predicted ({model})")
        title = f"Nothing measured ({state.measured_note}): predicted DRAM read per iteration"
    ax.set_xlabel("iteration")
    ax.grid(alpha=0.3)
    if timed:
        ax.legend()
    out.append((title, _png(fig)))

    out.append(("Predicted and measured speedup of every timed order", _speedup_png(state, evaluated)))

    pairs = [(a.prediction.l2_hit_rate * 100, a.ncu.l2_hit_rate_pct) for a in evaluated
             if a.ncu is not None and a.ncu.l2_hit_rate_pct is not None]
    if pairs:
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.plot(*zip(*pairs), "o")
        lo = min(min(p) for p in pairs) - 2
        hi = max(max(p) for p in pairs) + 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel(f"predicted hit % ({model})")
        ax.set_ylabel(f"measured hit % ({state.device})")
        out.append(("Predicted vs measured L2 hit rate", _png(fig)))
    else:
        out.append(("Predicted vs measured L2 hit rate", ""))

    out.append(("Where each tile of the best order runs", _placement_png(state)))
    return out


def _speedup_png(state: RunState, evaluated: list[Attempt]) -> str:
    """Measured speedup (95% CI) against the time model's predicted speedup (its interval) of every timed order;
    those timed alone against the kernel's own (what a gain is reported on) apart from those only raced."""
    timed = [a for a in evaluated if a.iteration > 0 and a.timed is not None and a.time is not None]
    if not timed:
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for stage, marker, label in (("race", "o", "raced with other orders"), ("pair", "s", "timed alone (A/B)")):
        rows = [a for a in timed if a.timed.stage == stage]
        if not rows:
            continue
        x = [a.time.speedup for a in rows]
        y = [a.timed.speedup for a in rows]
        xerr = [[a.time.speedup - a.time.low for a in rows], [a.time.high - a.time.speedup for a in rows]]
        yerr = [[a.timed.speedup - a.timed.ci95[0] for a in rows], [a.timed.ci95[1] - a.timed.speedup for a in rows]]
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=marker, alpha=0.75, elinewidth=0.7, label=label)
    values = [a.timed.speedup for a in timed] + [a.time.speedup for a in timed] + [1.0]
    lo, hi = min(values) - 0.03, max(values) + 0.03
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"predicted speedup (time model {state.scenario.model.name})")
    ax.set_ylabel(f"measured speedup ({state.device}), 95% CI")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _placement_png(state: RunState) -> str:
    """Two maps of the tile grid for the best order: the L2 domain (XCD) of each tile and its wave number."""
    scenario = state.scenario
    model = scenario.target.model
    best = state.best()
    perm = scenario.check(scenario.formula(best.formula)).perm
    n = perm.size
    launch = np.empty(n, dtype=np.int64)
    launch[perm] = np.arange(n)  # launch index of each tile
    wave = launch // (model.n_units * scenario.occupancy.programs)
    if model.n_domains > 1:
        first = launch_domains(n, model)[launch]
        first_title = f"{'XCD' if model.vendor == 'amd' else 'L2 domain'} of each tile"
    else:
        first = launch % model.n_units  # in-order dispatch: the first wave fills units in launch order
        first_title = f"{'SM' if model.vendor == 'nvidia' else 'unit'} of each tile in its wave (approx.)"
    shape = scenario.grid if scenario.rank == 2 else _square(n)
    fig, axes = _pyplot().subplots(1, 2, figsize=(9, 4))
    for ax, values, title in ((axes[0], first, first_title), (axes[1], wave, "wave (launch // resident slots)")):
        grid_values = np.full(shape[0] * shape[1], np.nan)
        grid_values[:n] = values
        image = ax.imshow(grid_values.reshape(shape), cmap="tab20" if values.max() < 20 else "viridis",
                          interpolation="nearest", aspect="auto")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"best order (iteration {best.iteration}: {best.label}) on {model.name} (model)", fontsize=9)
    return _png(fig)


def _square(n: int) -> tuple[int, int]:
    cols = int(np.ceil(np.sqrt(n)))
    return (int(np.ceil(n / cols)), cols)


def render_html(state: RunState) -> str:
    scenario = state.scenario
    rows = []
    for a in state.attempts:
        pred, comparison, ncu = a.prediction, a.comparison, a.ncu
        raced = a.measurement.raced if a.measurement is not None else None
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
                a.iteration, a.proposer, a.label, a.status, a.permutation_id or "",
                pct(pred.l2_hit_rate) if pred else "",
                fmt_bytes(pred.dram_read_bytes) if pred else "",
                a.time.text() if a.time is not None else "",
                raced.ci_text() if raced else "",
                comparison.ci_text() if comparison else "",
                f"{ncu.l2_hit_rate_pct:.1f}%" if ncu is not None and ncu.l2_hit_rate_pct is not None else "",
                a.message,
            )) + "</tr>"
        )
    plots = "".join(
        f"<h3>{html.escape(title)}</h3>" + (f'<img src="{src}"/>' if src else "<p>no measured data</p>")
        for title, src in _plots(state)
    )
    device = f"measured ({html.escape(state.device)})" if state.device else html.escape(
        "nothing measured: " + state.measured_note)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>swizzlelab optimize {html.escape(scenario.task.name)}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1200px}}td,th{{border:1px solid #ccc;padding:2px 6px;
font-size:12px;vertical-align:top}}table{{border-collapse:collapse}}pre{{background:#f5f5f5;padding:6px}}</style>
</head><body>
<h1>swizzlelab optimize: {html.escape(scenario.task.name)}</h1>
<p>{html.escape(scenario.sizes_label())}, grid {grid_text(scenario.grid)}, kernel
{html.escape(str(scenario.kernel.path))} ({html.escape(scenario.kernel.name)})<br>
{html.escape(scenario.target.note)}<br>Predictions: predicted (model {html.escape(scenario.target.model.name)}).
Measurements: {device}.</p>
<p><b>{html.escape(describe_best(state))}</b></p>
<h3>Best formula</h3><pre>{html.escape(state.best().formula)}</pre>
<h3>Iterations</h3>
<table><tr><th>#</th><th>proposer</th><th>order</th><th>status</th><th>permutation id</th>
<th>hit (predicted)</th><th>DRAM read (predicted)</th><th>speedup (predicted, time model)</th>
<th>speedup [95% CI] raced with other orders (measured)</th><th>speedup [95% CI] timed alone (measured)</th><th>hit (ncu)</th>
<th>message</th></tr>
{''.join(rows)}</table>
{plots}
<h3>Notes</h3><ul>{''.join(f'<li>{html.escape(n)}</li>' for n in state.notes)}</ul>
</body></html>
"""


def attempt_summary(attempt: Attempt) -> str:
    return f"{attempt.name()}: {attempt.status}: {attempt.message}"
