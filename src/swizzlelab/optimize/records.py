"""Records of an optimize run: a proposal, and one iteration's full outcome as stored in iterations.jsonl.

Plain dataclasses with to_dict/from_dict, so a run can be resumed from its JSONL file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Outcomes of one iteration; only EVALUATED iterations were simulated (and measured where a GPU is present).
EVALUATED = "evaluated"
NOT_BIJECTIVE = "not_bijective"
UNPARSABLE = "unparsable"
DUPLICATE = "duplicate"
NO_FORMULA = "no_formula"
STATUSES = (EVALUATED, NOT_BIJECTIVE, UNPARSABLE, DUPLICATE, NO_FORMULA)


@dataclass
class Proposal:
    """A candidate order as a proposer offers it: formula text plus the proposer's own texts."""

    formula_text: str
    hypothesis: str
    proposer: str  # "baseline" | "search" | "llm"
    label: str  # "grouped:GROUP_M=8", "llm reply 3", "kernel default site"
    reasoning: str = ""  # "Code optimization reasoning"
    summary: str = ""  # "Summary of optimization"
    why_better: str = ""  # "Reason why new should be better"
    reply_problem: str = ""  # llm: why no formula could be taken from the reply
    tokens: int = 0


@dataclass
class Attempt:
    """One iteration: the proposal, its proof, prediction, measurement and the reasons written at the time."""

    iteration: int
    status: str
    proposer: str
    label: str
    formula: str
    hypothesis: str
    permutation_id: str | None = None
    reasoning: str = ""
    summary: str = ""
    why_better: str = ""
    message: str = ""  # one line: what happened
    proof: dict[str, Any] | None = None
    duplicate_of: int | None = None
    prediction: dict[str, Any] | None = None
    wave: dict[str, Any] | None = None
    measurement: dict[str, Any] | None = None
    reasons_old: dict[str, str] = field(default_factory=dict)
    tokens: int = 0
    elapsed_s: float = 0.0

    @property
    def evaluated(self) -> bool:
        return self.status == EVALUATED

    @property
    def measured(self) -> bool:
        return bool(self.measurement) and self.measurement.get("comparison") is not None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "iteration", **asdict(self)}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Attempt:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})

    def name(self) -> str:
        return "baseline" if self.iteration == 0 else f"iteration {self.iteration}"
