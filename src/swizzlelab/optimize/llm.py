"""The LLM proposer: an OpenAI-compatible chat endpoint asked for a swizzle formula, through urllib only.

The prompt holds the kernel source, the memory analysis, the hardware model and the history with its reasons;
the formula is taken from a ```python block or a "Swizzling formula:" section of the reply.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


def config_from_env() -> LlmConfig:
    """SWIZZLELAB_LLM_BASE_URL, SWIZZLELAB_LLM_MODEL, SWIZZLELAB_LLM_API_KEY (base URL empty: not configured)."""
    return LlmConfig(
        base_url=os.environ.get("SWIZZLELAB_LLM_BASE_URL", "").strip(),
        model=os.environ.get("SWIZZLELAB_LLM_MODEL", "").strip() or "default",
        api_key=os.environ.get("SWIZZLELAB_LLM_API_KEY", "").strip(),
    )


class EndpointDown(Exception):
    """The endpoint could not be reached or answered with something that is not a chat completion."""


def chat(config: LlmConfig, messages: list[dict[str, str]]) -> tuple[str, int]:
    """(reply text, tokens used) of one chat completion; EndpointDown on any transport or format failure."""
    url = config.base_url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/chat/completions"
    body = json.dumps({
        "model": config.model,
        "messages": messages,
        "max_tokens": config.max_tokens_reply,
        "temperature": config.temperature,
    }).encode()
    headers = {"Content-Type": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout_s) as response:
            payload = json.loads(response.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as err:
        raise EndpointDown(f"{url} answered HTTP {err.code} {err.reason}") from None
    except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise EndpointDown(f"{url} is unreachable ({reason})") from None
    except ValueError:
        raise EndpointDown(f"{url} did not answer with JSON") from None
    try:
        text = payload["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        raise EndpointDown(f"{url} answered without choices[0].message.content") from None
    usage = payload.get("usage") or {}
    tokens = int(usage.get("total_tokens") or (len(json.dumps(messages)) + len(text)) // 4)
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

    def __post_init__(self) -> None:
        if not self.config.base_url:
            self._disable("llm: SWIZZLELAB_LLM_BASE_URL is not set; continuing with the search proposer")

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
            reply, tokens = chat(self.config, self.messages(history, best))
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
