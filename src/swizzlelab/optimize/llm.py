"""The LLM proposer: an OpenAI-compatible chat endpoint (through the openai SDK) asked for a swizzle formula.

The prompt holds the kernel source, the memory analysis, the hardware model and the history with its reasons;
the formula is taken from a ```python block or a "Swizzling formula:" section of the reply.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.optimize.reasons import why_old_was_slow
from swizzlelab.optimize.records import EVALUATED, Attempt, Proposal
from swizzlelab.swizzle import implicit_names

SECTION_NAMES = (
    "Code optimization reasoning",
    "Reason why old was slow",
    "Summary of optimization",
    "Reason why new should be better",
    "Swizzling formula",
)
CODE_BLOCK = re.compile(r"```(?:python|py|triton)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
ASSIGNS_OUTPUT = re.compile(r"^\s*(pid|pid_m|pid_n)\s*=", re.MULTILINE)


@dataclass(frozen=True)
class LlmConfig:
    """Endpoint and caps: `max_calls` replies and `max_tokens_total` tokens per run."""

    base_url: str
    model: str
    api_key: str = ""
    timeout_s: float = 120.0
    max_tokens_reply: int = 2000
    max_tokens_total: int = 200_000
    max_calls: int = 50
    temperature: float = 0.2


# The settings, in the order they are read: the OpenAI SDK's own variables first, as every client honours them.
BASE_URL_VARS = ("OPENAI_BASE_URL", "SWIZZLELAB_LLM_BASE_URL")
API_KEY_VARS = ("OPENAI_API_KEY", "SWIZZLELAB_LLM_API_KEY")
MODEL_VAR = "SWIZZLELAB_LLM_MODEL"


def _first_set(names: tuple[str, ...]) -> str:
    return next((os.environ[n].strip() for n in names if os.environ.get(n, "").strip()), "")


def config_from_env() -> LlmConfig:
    """OPENAI_BASE_URL (or SWIZZLELAB_LLM_BASE_URL), OPENAI_API_KEY (or SWIZZLELAB_LLM_API_KEY) and
    SWIZZLELAB_LLM_MODEL (default 'default', which local servers such as vLLM/llama.cpp map to their model)."""
    return LlmConfig(
        base_url=_first_set(BASE_URL_VARS),
        model=os.environ.get(MODEL_VAR, "").strip() or "default",
        api_key=_first_set(API_KEY_VARS),
    )


def require_endpoint(config: LlmConfig) -> None:
    """One-line UserError when --proposer llm/both has no endpoint to ask (never a silent fallback)."""
    if not config.base_url:
        raise UserError(
            "--proposer llm needs an OpenAI-compatible endpoint: set OPENAI_BASE_URL (e.g. "
            "http://127.0.0.1:8000/v1) and, if it asks for one, OPENAI_API_KEY; or use --proposer search"
        )


class EndpointDown(Exception):
    """The endpoint could not be reached or answered with something that is not a chat completion."""


def _client(config: LlmConfig) -> Any:
    # openai is the optional extra `llm`: imported only when an LLM proposer is asked for.
    try:
        from openai import OpenAI
    except ImportError:
        raise UserError("--proposer llm needs the openai package: pip install 'swizzlelab[llm]'") from None
    # A key is required by the SDK even for servers that ignore it.
    return OpenAI(base_url=config.base_url, api_key=config.api_key or "unused", timeout=config.timeout_s,
                  max_retries=0)


def chat(config: LlmConfig, messages: list[dict[str, str]], client: Any = None) -> tuple[str, int]:
    """(reply text, tokens used) of one chat completion; EndpointDown on any transport or format failure."""
    import openai

    client = client or _client(config)
    try:
        response = client.chat.completions.create(
            model=config.model, messages=messages, max_tokens=config.max_tokens_reply,
            temperature=config.temperature,
        )
    except openai.APIStatusError as err:
        raise EndpointDown(f"{config.base_url} answered HTTP {err.status_code}") from None
    except openai.APITimeoutError:
        raise EndpointDown(f"{config.base_url} did not answer within {config.timeout_s:.0f} s") from None
    except openai.APIConnectionError as err:
        raise EndpointDown(f"{config.base_url} is unreachable ({err.__cause__ or err})") from None
    except openai.APIError as err:
        raise EndpointDown(f"{config.base_url} answered with something that is not a chat completion ({err})") from None
    try:
        text = response.choices[0].message.content or ""
    except (AttributeError, IndexError, TypeError):
        raise EndpointDown(f"{config.base_url} answered without choices[0].message.content") from None
    usage = getattr(response, "usage", None)
    total = getattr(usage, "total_tokens", None) if usage is not None else None
    tokens = int(total or (len(json.dumps(messages)) + len(text)) // 4)
    return str(text), tokens


def sections(reply: str) -> dict[str, str]:
    """The reply's sections by heading ('Summary of optimization:' ...), text up to the next heading."""
    pattern = re.compile(
        r"^[#*\s]*(" + "|".join(re.escape(n) for n in SECTION_NAMES) + r")[*\s]*:[*]*[ \t]*",
        re.MULTILINE | re.IGNORECASE,
    )
    found = list(pattern.finditer(reply))
    out: dict[str, str] = {}
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(reply)
        name = next(n for n in SECTION_NAMES if n.lower() == match.group(1).lower())
        out[name] = reply[match.end():end].strip()
    return out


def extract_formula(reply: str) -> tuple[str, str]:
    """(formula text, problem): the last ```python block that assigns pid/pid_m/pid_n, else the
    'Swizzling formula:' section; problem is '' on success, else says what was missing."""
    blocks = [b for b in CODE_BLOCK.findall(reply) if ASSIGNS_OUTPUT.search(b)]
    if blocks:
        return blocks[-1].strip() + "\n", ""
    section = sections(reply).get("Swizzling formula", "")
    if section:
        inner = CODE_BLOCK.findall(section + "\n```")
        text = inner[0] if inner else section
        code = "\n".join(
            line for line in text.splitlines() if line.strip() and not line.strip().startswith("```")
        )
        if ASSIGNS_OUTPUT.search(code):
            return code.strip() + "\n", ""
    return "", (
        "the reply has no ```python block assigning pid (or pid_m and pid_n) and no 'Swizzling formula:' section"
    )


SYSTEM_PROMPT = """You optimize the launch order (swizzle) of a Triton GPU kernel for L2 cache reuse.
Answer with these sections, each starting on its own line:
Code optimization reasoning:
Reason why old was slow:
Summary of optimization:
Reason why new should be better:
Swizzling formula:
followed by one ```python block with the formula. The formula is straight-line Python over integers: start from
`pid = tl.program_id(0)`; you may use + - * // % << >> & | ^, comparisons, tl.minimum, tl.maximum, tl.where,
tl.cdiv, tl.num_programs(0) and the names listed as available; no loops, no if statements, no function
definitions. It must end by assigning {outputs}. It must be a bijection: every tile of the grid exactly once.
A formula that repeats an order already tried, or is not a bijection, wastes an iteration."""


@dataclass
class LlmProposer:
    """Asks the endpoint for one formula per call; unreachable endpoint: says so once, then `available` is False."""

    config: LlmConfig
    state: Any
    notes: Callable[[str], None] = lambda text: None
    available: bool = True
    tokens_used: int = 0
    calls: int = 0
    _context: str = field(default="", repr=False)

    _client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        require_endpoint(self.config)
        self._client = _client(self.config)

    def _disable(self, message: str) -> None:
        if self.available:
            self.available = False
            self.notes(message)

    def _problem_context(self) -> str:
        if self._context:
            return self._context
        scenario = self.state.scenario
        names = sorted(set(implicit_names(scenario.grid)) | set(scenario.args) | set(scenario.consts))
        values = {**implicit_names(scenario.grid), **scenario.args, **scenario.consts}
        model = scenario.target.model
        self._context = "\n".join([
            f"Kernel source ({scenario.kernel.path}):\n```python\n{scenario.kernel.source}```",
            f"Tile grid: {scenario.grid} ({scenario.n_tiles} programs, launched 1-D).",
            "Names available to the formula, with their values in this run: "
            + ", ".join(f"{n}={values[n]}" for n in names),
            "Memory analysis (from the access trace; predictions by the simulator):",
            self.state.memory_text(),
            f"Hardware model {model.name}: {model.source}",
        ])
        return self._context

    def _history_text(self, history: list[Attempt]) -> str:
        baseline = history[0] if history else None
        best = self.state.best_measured() if self.state.device else None
        lines = []
        for attempt in history:
            lines.append(
                f"{attempt.name()} [{attempt.status}] ({attempt.label}):\n```python\n{attempt.formula.strip()}\n```\n"
                f"-> {why_old_was_slow(attempt, baseline, best, self.state.scenario.target.model.vendor)}"
            )
        return "\n".join(lines)

    def messages(self, history: list[Attempt], best: Attempt) -> list[dict[str, str]]:
        outputs = "pid_m and pid_n" if self.state.scenario.rank == 2 else "pid"
        user = "\n\n".join([
            self._problem_context(),
            "Attempts so far (baseline = the kernel's own order):\n" + self._history_text(history),
            f"Best so far: {best.name()} ({best.label}). Propose one new order that should beat it.",
        ])
        return [{"role": "system", "content": SYSTEM_PROMPT.format(outputs=outputs)},
                {"role": "user", "content": user}]

    def propose(self, history: list[Attempt], best: Attempt) -> Proposal | None:
        """A proposal from the reply (possibly one without a formula), or None when the LLM is unavailable."""
        if not self.available:
            return None
        if self.calls >= self.config.max_calls:
            self._disable(f"llm: call cap ({self.config.max_calls}) reached; continuing with the search proposer")
            return None
        if self.tokens_used >= self.config.max_tokens_total:
            self._disable(
                f"llm: token cap ({self.config.max_tokens_total}) reached; continuing with the search proposer"
            )
            return None
        try:
            reply, tokens = chat(self.config, self.messages(history, best), self._client)
        except EndpointDown as err:
            self._disable(f"llm: {err}; continuing with the search proposer")
            return None
        self.calls += 1
        self.tokens_used += tokens
        formula, problem = extract_formula(reply)
        parts = sections(reply)
        return Proposal(
            formula_text=formula,
            hypothesis=(parts.get("Reason why new should be better") or parts.get("Summary of optimization")
                        or reply.strip())[:300],
            proposer="llm",
            label=f"llm {self.config.model} reply {self.calls}",
            reasoning=parts.get("Code optimization reasoning", ""),
            summary=parts.get("Summary of optimization", ""),
            why_better=parts.get("Reason why new should be better", ""),
            reply_problem=problem,
            tokens=tokens,
        )


def summarize_for_feedback(attempt: Attempt) -> str:
    return attempt.message if attempt.status != EVALUATED else attempt.hypothesis
