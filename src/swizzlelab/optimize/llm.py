"""The LLM proposer: an OpenAI-compatible chat endpoint (through the openai SDK) asked for a swizzle formula.

The prompt (optimize.prompt) holds what we know; the reply is read as models write it (optimize.reply). A reply
with no usable formula, a timeout or an endpoint error is one iteration with its reason; the run goes on.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.optimize.prompt import PromptLimits, build_messages
from swizzlelab.optimize.records import Attempt, Proposal
from swizzlelab.optimize.reply import OUTPUT_NAMES, read_reply, sections

__all__ = [
    "ChatReply", "EndpointDown", "LlmConfig", "LlmProposer", "chat", "config_from_env", "extract_formula",
    "require_endpoint", "sections",
]


@dataclass(frozen=True)
class LlmConfig:
    """Endpoint and caps: `max_calls` replies and `max_tokens_total` tokens per run; after `max_failures`
    calls in a row without a reply (timeout, connection, HTTP error) the LLM is left for the rest of the run."""

    base_url: str
    model: str
    api_key: str = ""
    timeout_s: float = 120.0
    max_tokens_reply: int = 2000
    max_tokens_total: int = 200_000
    max_calls: int = 50
    temperature: float = 0.2
    max_failures: int = 3
    log_prompts: bool = False  # keep each prompt (and reply) in the iteration's log
    limits: PromptLimits = PromptLimits()


# The settings, in the order they are read: the OpenAI SDK's own variables first, as every client honours them.
BASE_URL_VARS = ("OPENAI_BASE_URL", "SWIZZLELAB_LLM_BASE_URL")
API_KEY_VARS = ("OPENAI_API_KEY", "SWIZZLELAB_LLM_API_KEY")
MODEL_VAR = "SWIZZLELAB_LLM_MODEL"
# A CPU-served model writes a few tokens a second: its wait and reply length are settings too.
TIMEOUT_VAR = "SWIZZLELAB_LLM_TIMEOUT_S"
MAX_TOKENS_VAR = "SWIZZLELAB_LLM_MAX_TOKENS"


def _first_set(names: tuple[str, ...]) -> str:
    return next((os.environ[n].strip() for n in names if os.environ.get(n, "").strip()), "")


def _positive(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a number: give seconds or tokens, e.g. {name}={default:g}") from None
    if value <= 0:
        raise UserError(f"{name}={raw!r}: give a positive number")
    return value


def config_from_env(log_prompts: bool = False) -> LlmConfig:
    """OPENAI_BASE_URL (or SWIZZLELAB_LLM_BASE_URL), OPENAI_API_KEY (or SWIZZLELAB_LLM_API_KEY),
    SWIZZLELAB_LLM_MODEL (default 'default', which local servers such as vLLM/llama.cpp map to their model),
    SWIZZLELAB_LLM_TIMEOUT_S (default 120) and SWIZZLELAB_LLM_MAX_TOKENS (default 2000 a reply)."""
    return LlmConfig(
        base_url=_first_set(BASE_URL_VARS),
        model=os.environ.get(MODEL_VAR, "").strip() or "default",
        api_key=_first_set(API_KEY_VARS),
        timeout_s=_positive(TIMEOUT_VAR, 120.0),
        max_tokens_reply=int(_positive(MAX_TOKENS_VAR, 2000)),
        log_prompts=log_prompts,
    )


def require_endpoint(config: LlmConfig) -> None:
    """One-line UserError when --proposer llm/both has no endpoint to ask (never a silent fallback)."""
    if not config.base_url:
        raise UserError(
            "--proposer llm needs an OpenAI-compatible endpoint: set OPENAI_BASE_URL (e.g. "
            "http://127.0.0.1:8080/v1; docs/llm.md starts a local model) and, if it asks for one, OPENAI_API_KEY; "
            "or use --proposer search"
        )


class EndpointDown(Exception):
    """The endpoint could not be reached or answered with something that is not a chat completion."""


@dataclass(frozen=True)
class ChatReply:
    """One chat completion: its text, tokens used, why it stopped ('length': cut at max_tokens) and its seconds."""

    text: str
    tokens: int
    finish_reason: str = ""
    seconds: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


def _client(config: LlmConfig) -> Any:
    # openai is the optional extra `llm`: imported only when an LLM proposer is asked for.
    try:
        from openai import OpenAI
    except ImportError:
        raise UserError("--proposer llm needs the openai package: pip install 'swizzlelab[llm]'") from None
    # A key is required by the SDK even for servers that ignore it.
    return OpenAI(base_url=config.base_url, api_key=config.api_key or "unused", timeout=config.timeout_s,
                  max_retries=0)


def chat(config: LlmConfig, messages: list[dict[str, str]], client: Any = None) -> ChatReply:
    """One chat completion; EndpointDown on any transport or format failure (never hangs past timeout_s)."""
    import openai

    client = client or _client(config)
    started = time.perf_counter()
    try:
        response = client.chat.completions.create(
            model=config.model, messages=messages, max_tokens=config.max_tokens_reply,
            temperature=config.temperature,
        )
    except openai.APIStatusError as err:
        raise EndpointDown(f"{config.base_url} answered HTTP {err.status_code}{_detail(err)}") from None
    except openai.APITimeoutError:
        raise EndpointDown(f"{config.base_url} did not answer within {config.timeout_s:.0f} s") from None
    except openai.APIConnectionError as err:
        raise EndpointDown(f"{config.base_url} is unreachable ({err.__cause__ or err})") from None
    except openai.APIError as err:
        raise EndpointDown(f"{config.base_url} answered with something that is not a chat completion ({err})") from None
    try:
        choice = response.choices[0]
        text = choice.message.content or ""
    except (AttributeError, IndexError, TypeError):
        raise EndpointDown(f"{config.base_url} answered without choices[0].message.content") from None
    usage = getattr(response, "usage", None)
    total = getattr(usage, "total_tokens", None) if usage is not None else None
    tokens = int(total or (len(json.dumps(messages)) + len(text)) // 4)
    return ChatReply(str(text), tokens, str(getattr(choice, "finish_reason", "") or ""),
                     time.perf_counter() - started)


def _detail(err: Any) -> str:
    """The server's own words on an HTTP error (llama.cpp: the context is too long...), one line, short."""
    body = getattr(err, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    message = body.get("message") if isinstance(body, dict) else None
    message = str(message or re.sub(r"^Error code: \d+ - ", "", str(getattr(err, "message", "") or "")))
    message = message.replace("\n", " ").strip()
    return f" ({message[:200]})" if message else ""


def extract_formula(reply: str) -> tuple[str, str]:
    """(formula text, problem) of a reply: problem is '' when a formula was taken, else says why none could be."""
    read = read_reply(reply)
    return read.formula, read.problem


@dataclass
class LlmProposer:
    """Asks the endpoint for one formula per call. A call without a reply is an iteration with its reason; after
    `max_failures` of them in a row, or at a cap, it says so once and `available` turns False."""

    config: LlmConfig
    state: Any
    notes: Callable[[str], None] = lambda text: None
    available: bool = True
    tokens_used: int = 0
    calls: int = 0
    failures: int = 0  # calls in a row without a reply
    _client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        require_endpoint(self.config)
        self._client = _client(self.config)

    def _disable(self, message: str) -> None:
        if self.available:
            self.available = False
            self.notes(message)

    def messages(self, history: list[Attempt], best: Attempt) -> list[dict[str, str]]:
        return build_messages(self.state, history, best, self.config.limits)

    def _outputs(self) -> tuple[str, ...]:
        site = tuple(getattr(self.state.scenario, "outputs", None) or ())
        return tuple(dict.fromkeys(OUTPUT_NAMES + site))

    def _accept(self, code: str) -> str:
        """'' when the code parses and proves a bijection on the task, else why not (to choose among blocks)."""
        try:
            checked = self.state.scenario.check(self.state.scenario.formula(code))
        except UserError as err:
            return str(err)
        return "" if checked.proof.is_bijection else checked.proof.message()

    def propose(self, history: list[Attempt], best: Attempt) -> Proposal | None:
        """A proposal from the reply (one without a formula says why), or None once the LLM is unavailable."""
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
        messages = self.messages(history, best)
        prompt = _prompt_text(messages) if self.config.log_prompts else ""
        self.calls += 1
        label = f"llm {self.config.model} reply {self.calls}"
        try:
            answer = chat(self.config, messages, self._client)
        except EndpointDown as err:
            self.failures += 1
            if self.failures >= self.config.max_failures:
                self._disable(f"llm: {self.failures} calls in a row without a reply (last: {err}); continuing with "
                              "the search proposer")
            return Proposal(formula_text="", hypothesis="", proposer="llm", label=label, prompt=prompt,
                            reply_problem=f"no reply: {err}")
        self.failures = 0
        self.tokens_used += answer.tokens
        read = read_reply(answer.text, self._outputs(), answer.truncated, self.config.max_tokens_reply, self._accept)
        parts = read.sections
        where = f" ({read.where})" if read.formula else ""
        return Proposal(
            formula_text=read.formula,
            hypothesis=(parts.get("Reason why new should be better") or parts.get("Summary of optimization")
                        or read.reasoning)[:300],
            proposer="llm",
            label=label + where,
            reasoning=read.reasoning,
            summary=parts.get("Summary of optimization", ""),
            why_better=parts.get("Reason why new should be better", ""),
            reply_problem=read.problem,
            tokens=answer.tokens,
            prompt=prompt,
            reply=answer.text,
            reply_s=answer.seconds,
        )


def _prompt_text(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
