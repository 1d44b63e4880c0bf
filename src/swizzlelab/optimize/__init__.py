"""swizzlelab.optimize: the optimizer loop (search and LLM proposers), its logs, reports and measurement cache.

`load_problem` + `Options` + `run` drive it from Python; `swizzlelab optimize` from the shell.
"""

from swizzlelab.optimize.loop import (
    Options,
    RunResult,
    RunState,
    describe_best,
    read_jsonl,
    run,
)
from swizzlelab.optimize.problem import Problem, load_problem, resolve_target
from swizzlelab.optimize.records import Attempt, Proposal

__all__ = [
    "Attempt",
    "Options",
    "Problem",
    "Proposal",
    "RunResult",
    "RunState",
    "describe_best",
    "load_problem",
    "read_jsonl",
    "resolve_target",
    "run",
]
