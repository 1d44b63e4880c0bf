"""The LLM's prompt: the kernel, its launch, the target's L2 layout, the trace's memory analysis, the orders tried
with their predicted (and measured) results and the formula language's rules, summarized to fit a small context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swizzlelab.fmt import fmt_bytes, grid_text, pct
from swizzlelab.optimize.reasons import memory_summary, why_old_was_slow
from swizzlelab.optimize.records import EVALUATED, Attempt
from swizzlelab.swizzle import implicit_names
from swizzlelab.swizzle.lang import BUILTINS, TL_FUNCS

# The original work's sections, so the log keeps its shape; the formula last, in one code block.
SYSTEM_PROMPT = """You optimize the launch order (swizzle) of a Triton GPU kernel for L2 cache reuse.
Reply in plain text with these sections, each heading on its own line:
Memory analysis:
Code optimization reasoning:
Reason why old was slow:
Summary of optimization:
Reason why new should be better:
Swizzling formula:
then exactly one ```python block holding only the formula (no kernel code, no explanation inside it).
Keep each section to one to three sentences; do not repeat the question.

Formula language (the formula is checked before anything runs; a broken rule wastes an iteration):
- straight-line integer code: one assignment per line, starting from `pid = tl.program_id(0)`;
- operators + - * // % << >> & | ^, comparisons, `a if c else b`; calls only {calls};
- names: the launch index, names you assign, and the names listed under "Names available";
- not allowed: loops, if statements, def/return, imports, '/', '**', tl.arange, tl.load, tl.store, casts (.to,
  int()), lists, tuples as values, any other function;
- it ends by assigning {outputs}; every tile of the grid exactly once (a bijection) or it is rejected;
- an order that repeats one already tried (same permutation) is not evaluated again."""


@dataclass(frozen=True)
class PromptLimits:
    """How much of the history goes in full: the kernel source is cut at `source_chars`; the whole user message
    aims at `total_chars` (about 3.5 characters a token), older attempts shrinking to one line each."""

    total_chars: int = 14_000
    source_chars: int = 5_000
    full_attempts: int = 4


def outputs_text(scenario: Any) -> str:
    return "pid_m and pid_n (or a linear pid, decoded row-major)" if scenario.rank == 2 else "pid"


def system_prompt(scenario: Any) -> str:
    calls = ", ".join([f"tl.{name}" for name in TL_FUNCS] + list(BUILTINS))
    return SYSTEM_PROMPT.format(calls=calls, outputs=outputs_text(scenario))


def l2_layout(scenario: Any) -> str:
    """Where programs run and which L2 they fill, in the terms a formula changes."""
    model = scenario.target.model
    programs = scenario.occupancy.programs
    wave = model.units_per_domain * programs
    if model.n_domains > 1 and model.dispatch == "round_robin_domains":
        return (
            f"Target {model.name}: {model.n_domains} XCDs, each with its own L2 of "
            f"{fmt_bytes(model.l2_effective_bytes_per_domain)} and {model.units_per_domain} compute units. Program "
            f"(launch index) i runs on XCD i % {model.n_domains}; programs on different XCDs never hit in each "
            f"other's L2, so data read by k XCDs is fetched k times. About {wave} programs per XCD run at once "
            f"({programs} per unit); an XCD's programs are launch indices x, x+{model.n_domains}, "
            f"x+{2 * model.n_domains}, ..."
        )
    return (
        f"Target {model.name}: one L2 of {fmt_bytes(model.l2_effective_bytes_per_domain * model.n_domains)} shared "
        f"by {model.n_units} SMs; programs start in launch-index order, about {wave} at once ({programs} per SM): "
        "programs close in launch order share the L2 while they run."
    )


def problem_text(state: Any, limits: PromptLimits) -> str:
    """What stays the same every iteration: kernel, launch, names, L2 layout, memory analysis."""
    scenario = state.scenario
    names = {**implicit_names(scenario.grid), **scenario.args, **scenario.consts}
    source = scenario.kernel.source
    if len(source) > limits.source_chars:
        source = source[:limits.source_chars] + "\n# ... (cut)\n"
    analysis = state.analysis()
    return "\n".join([
        f"Kernel ({scenario.kernel.name}):\n```python\n{source.rstrip()}\n```",
        f"Launch: tile grid {grid_text(scenario.grid)}, {scenario.n_tiles} programs. The kernel's own order "
        f"(its swizzle site):\n```python\n{scenario.kernel.site_text().strip()}\n```",
        "Names available, with their values in this run: "
        + ", ".join(f"{n}={names[n]}" for n in sorted(names)),
        l2_layout(scenario),
        "Memory analysis (from the access trace):",
        memory_summary(scenario, analysis),
        f"Compulsory DRAM traffic (every touched sector once): {fmt_bytes(analysis.compulsory_bytes)}, of which "
        f"reads {fmt_bytes(analysis.compulsory_read_bytes)}; requested from L2 {fmt_bytes(analysis.requested_bytes)}"
        " (from trace).",
    ])


def _result(attempt: Attempt, state: Any) -> str:
    baseline = state.attempts[0] if state.attempts else None
    best = state.best_measured() if state.device else None
    return why_old_was_slow(attempt, baseline, best, state.scenario.model.vendor)


def _one_line(attempt: Attempt) -> str:
    pred = attempt.prediction
    if attempt.status == EVALUATED and pred is not None:
        text = f"predicted L2 hit {pct(pred.l2_hit_rate)}, DRAM read {fmt_bytes(pred.dram_read_bytes)}"
        if attempt.comparison is not None:
            text += f", measured {attempt.comparison.ci_text()} ({attempt.measurement.device})"
        return text
    return attempt.status + (f": {attempt.message[:160]}" if attempt.message else "")


def history_text(state: Any, history: list[Attempt], budget: int, limits: PromptLimits) -> str:
    """The attempts so far: the baseline, the best and the latest few with formula and result, the others one line
    each (newest first to drop when over `budget` characters)."""
    best = state.best() if history else None
    keep = {history[0].iteration} if history else set()
    keep |= {a.iteration for a in history[-limits.full_attempts:]}
    if best is not None:
        keep.add(best.iteration)
    blocks = []
    for attempt in history:
        head = f"{attempt.name()} ({attempt.proposer}: {attempt.label}) [{attempt.status}]"
        if attempt.iteration in keep:
            formula = attempt.formula.strip() or "(no formula)"
            blocks.append(f"{head}:\n```python\n{formula}\n```\n-> {_result(attempt, state)}")
        else:
            blocks.append(f"{head} -> {_one_line(attempt)}")
    text = "\n".join(blocks)
    while len(text) > budget and len(blocks) > 2:
        # Over budget: drop the oldest non-kept line (the baseline stays first).
        blocks.pop(1)
        text = "\n".join(["(older attempts left out)", *blocks])
    return text


def feedback_text(history: list[Attempt], state: Any) -> str:
    """After a rejected or repeated formula: the rule it broke, in so many words."""
    last = history[-1] if len(history) > 1 else None
    if last is None or last.status == EVALUATED or last.proposer != "llm":
        return ""
    return (f"Your last reply ({last.name()}) was {last.status.replace('_', ' ')}: {_result(last, state)}. "
            "Fix exactly that in the next formula.")


def build_messages(state: Any, history: list[Attempt], best: Attempt,
                   limits: PromptLimits = PromptLimits()) -> list[dict[str, str]]:
    """The chat messages of one LLM call."""
    problem = problem_text(state, limits)
    ask = (f"Best so far: {best.name()} ({best.label}): {_one_line(best)}.\n"
           "Answer now with one new order, different from every order above, that should read less from DRAM than "
           "the best so far: the sections (one to three sentences each), then one ```python block with the whole "
           f"formula, from `pid = tl.program_id(0)` to the assignment of {outputs_text(state.scenario)}.")
    feedback = feedback_text(history, state)
    budget = max(1000, limits.total_chars - len(problem) - len(ask) - len(feedback))
    user = "\n\n".join(p for p in [
        problem,
        "Orders tried so far (baseline = the kernel's own order):\n" + history_text(state, history, budget, limits),
        feedback,
        ask,
    ] if p)
    return [{"role": "system", "content": system_prompt(state.scenario)}, {"role": "user", "content": user}]
