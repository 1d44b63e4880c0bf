"""swizzlelab.optimize: the optimizer loop (search and LLM proposers), its logs, reports and measurement cache.

`swizzlelab.scenario.load_scenario` + `Options` + `run` drive it from Python; `swizzlelab optimize` from the shell.
"""

from swizzlelab.optimize.loop import RunResult, run
from swizzlelab.optimize.state import Options, RunState, describe_best, read_jsonl
from swizzlelab.optimize.records import Attempt, Proposal

__all__ = [
    "Attempt",
    "Options",
    "Proposal",
    "RunResult",
    "RunState",
    "describe_best",
    "read_jsonl",
    "run",
]
