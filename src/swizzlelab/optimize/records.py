"""Records of an optimize run as typed dataclasses: a proposal, and one iteration's proof, prediction, first-wave
statistics and measurement. JSON only at the edges: `to_dict` / `from_dict` for iterations.jsonl and the caches.
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


def _known(cls: type, record: dict[str, Any]) -> dict[str, Any]:
    """The keys of `record` that are fields of `cls` (records written by older versions may carry more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in record.items() if k in names}


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
    prompt: str = ""  # llm: the prompt sent (kept with --log-prompts)
    reply: str = ""  # llm: the reply as received
    reply_s: float = 0.0  # llm: seconds the endpoint took to answer


@dataclass(frozen=True)
class ProofSummary:
    """The bijection proof of a formula on the run's grid (counts; examples live in the message)."""

    grid: tuple[int, ...]
    is_bijection: bool
    n_tiles: int
    n_programs: int
    n_missing: int
    n_duplicated: int
    n_out_of_range: int
    message: str
    permutation_id: str

    @classmethod
    def of(cls, proof: Any, permutation_id: str) -> ProofSummary:
        return cls(grid=tuple(proof.grid), is_bijection=bool(proof.is_bijection), n_tiles=int(proof.n_tiles),
                   n_programs=int(proof.n_programs), n_missing=int(proof.n_missing),
                   n_duplicated=int(proof.n_duplicated), n_out_of_range=int(proof.n_out_of_range),
                   message=proof.message(), permutation_id=permutation_id)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ProofSummary:
        data = _known(cls, record)
        data["grid"] = tuple(data.get("grid", ()))
        data.setdefault("message", "")
        data.setdefault("permutation_id", "")
        data.setdefault("is_bijection", not (data.get("n_missing") or data.get("n_duplicated")))
        data.setdefault("n_programs", data.get("n_tiles", 0))
        return cls(**data)


@dataclass(frozen=True)
class Prediction:
    """The simulator's figures for one order (every figure predicted by `model`)."""

    model: str
    occupancy: int
    l2_hit_rate: float
    line_hit_rate: float
    dram_read_bytes: int
    dram_write_bytes: int
    compulsory_bytes: int
    requested_bytes: int
    best_hit_rate: float
    per_domain_hit_rate: tuple[float, ...] = ()
    predicted_dram_ms: float | None = None  # DRAM bytes at the model's peak bandwidth
    sim_s: float = 0.0
    # Reads leaving the L2s (to the Infinity Cache on AMD, to DRAM on NVIDIA): what an order changes most.
    l2_miss_read_bytes: int = 0
    llc_hit_rate: float | None = None  # AMD Infinity Cache share of those reads
    set_fraction: float = 1.0  # < 1: a screening estimate from a sample of the L2 sets
    fabric_bytes: int = 0  # bytes looked up again at a far L2 partition (Hopper's two partitions; 0 with one)
    partial_write_bytes: int = 0  # bytes of written-back lines they did not hold dirty (partial-line DRAM writes)

    @property
    def kind(self) -> str:
        return f"predicted (model {self.model})"

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    def score(self) -> tuple[float, float]:
        """Lower is better: predicted bytes read past the L2s plus DRAM writes, then a higher hit rate. On
        NVIDIA the L2 misses are the DRAM reads; on AMD they go to the Infinity Cache, which can hide them from
        DRAM while they still cost fabric bandwidth, so L2 misses rank orders there too."""
        reads = self.l2_miss_read_bytes or self.dram_read_bytes
        return (float(reads + self.dram_write_bytes), -float(self.l2_hit_rate))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind, "dram_bytes": self.dram_bytes}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Prediction:
        data = _known(cls, record)
        data["per_domain_hit_rate"] = tuple(data.get("per_domain_hit_rate", ()))
        return cls(**data)


@dataclass(frozen=True)
class TimeFigures:
    """The time model's prediction for one order (sim.timemodel), as the optimizer used it: the model's own
    speedup and interval, and the speedup after this run's measurements corrected it (optimize.learn)."""

    speedup: float
    low: float
    high: float
    model: str
    anchor: str
    corrected: float | None = None  # after the run's own measurements; None before any

    @property
    def kind(self) -> str:
        return f"predicted (time model {self.model})"

    def text(self) -> str:
        fixed = f", {self.corrected:.3f}x after this run's measurements" if self.corrected is not None else ""
        return f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]{fixed} {self.kind}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TimeFigures:
        return cls(**_known(cls, record))


@dataclass(frozen=True)
class Wave:
    """What the programs resident together at launch (the first wave of each L2 domain) read.

    `sharing` = sum of each program's distinct lines / distinct lines of the wave (1.0: nothing shared);
    `cross_domain_fraction` = share of the wave's lines read by more than one domain (fetched once per domain);
    `rows`/`cols` = distinct tile rows / columns per domain wave (2-D grids; 0 otherwise).
    """

    wave_programs: int
    n_domains: int
    distinct_bytes: int  # per domain wave, mean
    program_bytes: int  # per program, mean distinct
    sharing: float
    cross_domain_fraction: float
    rows: float
    cols: float
    l2_bytes_per_domain: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Wave:
        return cls(**_known(cls, record))


@dataclass(frozen=True)
class Speedup:
    """An interleaved A/B timing of an order against the kernel's own (a = baseline, b = candidate)."""

    speedup: float
    ci95: tuple[float, float]
    baseline_ms: float
    candidate_ms: float
    baseline_sem_ms: float = 0.0
    candidate_sem_ms: float = 0.0
    n_pairs: int = 0
    method: str = ""
    is_improvement: bool = False
    # "pair": an A/B interleaved timing of this order alone against the kernel's own (what a gain is reported on);
    # "race": its figure in a race of many orders against the kernel's own (harness.race), which ranks and prunes
    stage: str = "pair"
    note: str = ""  # e.g. why a raced order left the race early

    def verdict(self) -> str:
        """'improvement', 'regression' or 'within noise': only a CI that excludes 1.0 counts."""
        low, high = self.ci95
        if low > 1.0:
            return "improvement"
        if high < 1.0:
            return "regression"
        return "within noise"

    def ci_text(self) -> str:
        low, high = self.ci95
        return f"{self.speedup:.3f}x [{low:.3f}, {high:.3f}]"

    @classmethod
    def of(cls, comparison: Any, stage: str = "pair", note: str = "") -> Speedup:
        """From harness.timing.Comparison."""
        return cls(speedup=comparison.speedup, ci95=(comparison.ci_low, comparison.ci_high),
                   baseline_ms=comparison.a.mean_ms, candidate_ms=comparison.b.mean_ms,
                   baseline_sem_ms=comparison.a.sem_ms, candidate_sem_ms=comparison.b.sem_ms,
                   n_pairs=comparison.a.n, method=comparison.method, is_improvement=comparison.is_improvement,
                   stage=stage, note=note)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Speedup:
        data = _known(cls, record)
        data["ci95"] = tuple(data["ci95"])
        return cls(**data)


@dataclass(frozen=True)
class NcuFigures:
    """Nsight Compute's figures for the optimized kernel's launches (or why there are none)."""

    l2_hit_rate_pct: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    duration_ns: float | None = None
    kernels: tuple[str, ...] = ()
    source: str = ""
    error: str = ""

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> NcuFigures:
        data = _known(cls, record)
        data["kernels"] = tuple(data.get("kernels", ()))
        return cls(**data)


@dataclass(frozen=True)
class BaselineTiming:
    """The kernel's own order timed alone (CUDA events, L2 flushed)."""

    mean_ms: float
    sem_ms: float
    n: int
    device: str = ""

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> BaselineTiming:
        return cls(**_known(cls, record))


@dataclass(frozen=True)
class Measurement:
    """What the local GPU measured for one order: correctness, the timing against the baseline, ncu figures."""

    device: str
    passed: bool | None = None  # output correct (None: not checked, the baseline)
    check_message: str = ""
    timing: BaselineTiming | None = None  # the baseline's own timing
    comparison: Speedup | None = None  # the order timed alone against the kernel's own: what a gain stands on
    raced: Speedup | None = None  # its figure in a race of many orders (ranks them; never reported as a gain alone)
    ncu: NcuFigures | None = None
    error: str = ""
    cached: bool = False

    @property
    def kind(self) -> str:
        return f"measured ({self.device})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Measurement:
        data = _known(cls, record)
        if isinstance(record.get("correctness"), dict):  # records written before the typed layout
            data.setdefault("passed", record["correctness"].get("passed"))
            data.setdefault("check_message", record["correctness"].get("message", ""))
        data["timing"] = BaselineTiming.from_dict(data["timing"]) if data.get("timing") else None
        data["comparison"] = Speedup.from_dict(data["comparison"]) if data.get("comparison") else None
        data["raced"] = Speedup.from_dict(data["raced"]) if data.get("raced") else None
        data["ncu"] = NcuFigures.from_dict(data["ncu"]) if data.get("ncu") else None
        return cls(**data)


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
    proof: ProofSummary | None = None
    duplicate_of: int | None = None
    prediction: Prediction | None = None
    wave: Wave | None = None
    measurement: Measurement | None = None
    time: TimeFigures | None = None
    reasons_old: dict[str, str] = field(default_factory=dict)
    tokens: int = 0
    elapsed_s: float = 0.0
    prompt: str = ""  # llm: the prompt sent (with --log-prompts)
    reply: str = ""  # llm: the reply as received
    reply_s: float = 0.0  # llm: seconds the endpoint took to answer

    @property
    def evaluated(self) -> bool:
        return self.status == EVALUATED

    @property
    def measured(self) -> bool:
        return self.timed is not None

    @property
    def comparison(self) -> Speedup | None:
        """The order's own A/B timing against the kernel's order: the only figure a gain is reported on."""
        return self.measurement.comparison if self.measurement is not None else None

    @property
    def timed(self) -> Speedup | None:
        """The order's measured speedup: its own A/B timing where it has one, else its figure in a race."""
        if self.measurement is None:
            return None
        return self.measurement.comparison or self.measurement.raced

    @property
    def ncu(self) -> NcuFigures | None:
        return self.measurement.ncu if self.measurement is not None else None

    def to_dict(self) -> dict[str, Any]:
        record = {"type": "iteration", **asdict(self)}
        if self.prediction is not None:
            record["prediction"] = self.prediction.to_dict()
        if self.measurement is not None:
            record["measurement"] = self.measurement.to_dict()
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Attempt:
        data = _known(cls, record)
        data["proof"] = ProofSummary.from_dict(data["proof"]) if data.get("proof") else None
        data["prediction"] = Prediction.from_dict(data["prediction"]) if data.get("prediction") else None
        data["wave"] = Wave.from_dict(data["wave"]) if data.get("wave") else None
        data["measurement"] = Measurement.from_dict(data["measurement"]) if data.get("measurement") else None
        data["time"] = TimeFigures.from_dict(data["time"]) if data.get("time") else None
        return cls(**data)

    def name(self) -> str:
        return "baseline" if self.iteration == 0 else f"iteration {self.iteration}"
