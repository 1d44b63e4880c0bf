"""A model's reply read as models write it: sections, code fenced or not, a Triton kernel's body, reasoning in
<think> tags, a reply cut at the token limit. What can be taken is formula text to check; else one line says why.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

from swizzlelab.swizzle import find_site
from swizzlelab.swizzle.site import KernelSiteError

SECTION_NAMES = (
    "Memory analysis",
    "Code optimization reasoning",
    "Reason why old was slow",
    "Summary of optimization",
    "Reason why new should be better",
    "Swizzling formula",
)
# Names a formula may end by assigning on any task: pid (1-D, or linear before row-major decoding on a 2-D
# grid), pid_m and pid_n (2-D); a kernel's site may add its own (start_m, off_hz, ...).
OUTPUT_NAMES = ("pid", "pid_m", "pid_n")
FENCE = re.compile(r"^\s*(```|~~~)")
# A line of straight-line code as models write it outside fences: an assignment (augmented or to a tuple).
ASSIGNMENT = re.compile(r"^\s*[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)*\s*(=|\+=|-=|\*=|//=|%=|<<=|>>=)(?!=)\s*\S")
CODE_LINE = re.compile(r"^\s*(#.*|@.*|def .*|return\b.*|import .*|from .*|tl\.\w+\(.*)$")
# Lines of a kernel after its remap: offsets, pointers, loads and stores (the swizzle site ends before them).
KERNEL_BODY = re.compile(r"tl\.(arange|load|store|zeros|dot|make_block_ptr)\b|_ptr\b")
DEF = re.compile(r"^\s*def \w+")
DROPPED = re.compile(r"^\s*(@|return\b|import |from \S+ import )")
INLINE = re.compile(r"^\s*`([^`]+)`\s*$")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Candidate:
    """One piece of a reply that may hold the formula: its code and where it came from."""

    code: str
    where: str
    complete: bool = True  # False: it runs to the end of a reply cut at the token limit


@dataclass(frozen=True)
class Reply:
    """What was taken from one reply: the formula text ('' when none) and where from, or why none could be."""

    text: str
    formula: str = ""
    where: str = ""
    problem: str = ""
    truncated: bool = False
    sections: dict[str, str] = field(default_factory=dict)
    reasoning: str = ""  # the reply's reasoning section, else its prose outside the code (shortened)


def split_thinking(text: str) -> tuple[str, str, bool]:
    """(visible text, thinking, thinking closed): a reasoning model's <think>...</think> is kept apart."""
    start = text.find(THINK_OPEN)
    if start < 0:
        # Some servers strip the opening tag and keep the closing one.
        end = text.find(THINK_CLOSE)
        if end < 0:
            return text, "", True
        return text[end + len(THINK_CLOSE):], text[:end], True
    end = text.find(THINK_CLOSE, start)
    if end < 0:
        return text[:start], text[start + len(THINK_OPEN):], False
    return text[:start] + text[end + len(THINK_CLOSE):], text[start + len(THINK_OPEN):end], True


def sections(reply: str) -> dict[str, str]:
    """The reply's sections by heading ('Summary of optimization:', '## Swizzling formula' ...), text up to the
    next heading."""
    pattern = re.compile(
        r"^[#*\s]*(" + "|".join(re.escape(n) for n in SECTION_NAMES) + r")[*\s]*(:|$)[*]*[ \t]*",
        re.MULTILINE | re.IGNORECASE,
    )
    found = list(pattern.finditer(reply))
    out: dict[str, str] = {}
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(reply)
        name = next(n for n in SECTION_NAMES if n.lower() == match.group(1).lower())
        out.setdefault(name, reply[match.end():end].strip())
    return out


def fenced_blocks(text: str) -> list[tuple[str, bool, int, int]]:
    """(code, closed, first line, end line) of each ``` or ~~~ block; an unclosed last block runs to the end."""
    blocks = []
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if not FENCE.match(line):
            continue
        if start is None:
            start = i
        else:
            blocks.append(("\n".join(lines[start + 1:i]), True, start, i + 1))
            start = None
    if start is not None:
        blocks.append(("\n".join(lines[start + 1:]), False, start, len(lines)))
    return blocks


def code_runs(text: str) -> list[tuple[str, int, int]]:
    """Runs of code-like lines outside fences (assignments, comments, decorators, def/return lines): how models
    write a formula in prose replies. (code, first line, end line)."""
    # A line that is one inline code span (`pid_m = pid % 8`) is code too.
    lines = [INLINE.sub(r"\1", line) for line in text.splitlines()]
    inside = set()
    for _, _, first, end in fenced_blocks(text):
        inside.update(range(first, end))
    runs, current, first = [], [], 0
    for i, line in enumerate([*lines, ""]):
        codey = i < len(lines) and i not in inside and (ASSIGNMENT.match(line) or (current and (
            CODE_LINE.match(line) or (line.startswith((" ", "\t")) and line.strip()))))
        if codey:
            first = i if not current else first
            current.append(line)
            continue
        if any(ASSIGNMENT.match(c) for c in current):
            runs.append(("\n".join(current), first, i))
        current = []
    return runs


def inline_code(text: str) -> list[tuple[str, int]]:
    """Inline code spans in prose that hold assignments (`pid = tl.program_id(0); pid_m = pid % 8`), one
    candidate per line, statements split at ';'. (code, line)."""
    out = []
    for i, line in enumerate(text.splitlines()):
        spans = [span for span in re.findall(r"`([^`\n]+)`", line) if ASSIGNMENT.match(span.split(";")[0])]
        if spans:
            statements = [part.strip() for span in spans for part in span.split(";") if part.strip()]
            out.append(("\n".join(statements), i))
    return out


def assigned_outputs(code: str, outputs: tuple[str, ...]) -> set[str]:
    """Which of `outputs` the code assigns (plain, augmented or tuple assignments)."""
    found = set()
    for match in re.finditer(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?:[-+*%/<>]{0,2})=(?!=)", code,
                             re.MULTILINE):
        found.update(n.strip() for n in match.group(1).split(","))
    return found & set(outputs)


def _signature_lines(lines: list[str]) -> set[int]:
    """Indices of the lines of each `def ...(...):` header, parameters on lines of their own included."""
    out: set[int] = set()
    for start, line in enumerate(lines):
        if DEF.match(line):
            stop = next((i for i in range(start, len(lines)) if re.search(r"\)\s*(->[^:]*)?:\s*(#.*)?$", lines[i])),
                        start)
            out.update(range(start, stop + 1))
    return out


def from_kernel(code: str) -> tuple[str, str]:
    """(formula text, note) from code that holds a kernel or its body: the swizzle site as `find_site` takes it
    from a kernel, else the code unchanged with decorator, import and return lines dropped."""
    text = textwrap.dedent(code)
    lines = text.splitlines()
    header = _signature_lines(lines)
    # a pointer parameter on its own line of a signature is not a kernel body line
    body_at = next((i for i, line in enumerate(lines) if KERNEL_BODY.search(line) and i not in header), len(lines))
    last_output = max((i for i, line in enumerate(lines) if assigned_outputs(line, OUTPUT_NAMES)), default=-1)
    # Kernel lines after the remap (offsets, loads) mark a kernel body; a tl.arange before the last tile id is
    # part of the formula, left for the check to name.
    if body_at > last_output and (body_at < len(lines) or any(DEF.match(line) for line in lines)):
        source = text if re.search(r"^\s*def \w+", text, re.MULTILINE) else (
            "def _reply_kernel():\n" + textwrap.indent(text, "    "))
        name = re.search(r"^\s*def (\w+)", source, re.MULTILINE).group(1)  # type: ignore[union-attr]
        try:
            site = find_site(source, name)
            return site.formula_text(), "its kernel's swizzle site"
        except (KernelSiteError, SyntaxError, ValueError):
            pass
    kept = [line for i, line in enumerate(lines) if not DROPPED.match(line) and i not in header]
    body = textwrap.dedent("\n".join(kept)).strip("\n")
    helper = re.search(r"^\s*def \w+\(([^)]*)\)", text, re.MULTILINE)
    params = [p.split(":")[0].split("=")[0].strip() for p in helper.group(1).split(",")] if helper else []
    if "pid" in params and not re.match(r"^\s*pid\s*=", body):
        # A helper taking the launch index as `pid`: the formula reads it from the launch.
        return "pid = tl.program_id(0)\n" + body + "\n", "helper body"
    return body + "\n", "helper body" if helper else ""


def candidates(visible: str, truncated: bool) -> list[Candidate]:
    """Where a formula may be, most likely first: fenced blocks from the last, the 'Swizzling formula:'
    section, runs of code lines in the prose from the last."""
    lines = visible.rstrip().splitlines()
    out = []
    blocks = fenced_blocks(visible)
    for n, (code, closed, _, end) in reversed(list(enumerate(blocks, 1))):
        cut = truncated and (not closed or end >= len(lines))
        out.append(Candidate(code, f"code block {n}/{len(blocks)}", complete=not cut and closed))
    section = sections(visible).get("Swizzling formula", "")
    if section and not fenced_blocks(section):
        out.append(Candidate(section, "formula section",
                             complete=not (truncated and visible.rstrip().endswith(section.rstrip()))))
    for code, _, end in reversed(code_runs(visible)):
        out.append(Candidate(code, "prose lines", complete=not (truncated and end >= len(lines))))
    for code, line in reversed(inline_code(visible)):
        out.append(Candidate(code, "inline code", complete=not (truncated and line >= len(lines) - 1)))
    return out


def _prose(visible: str) -> str:
    """The reply without its code: what the model wrote as reasoning (shortened)."""
    text = visible
    for code, _, _, _ in fenced_blocks(visible):
        text = text.replace(code, "")
    text = "\n".join(line for line in text.splitlines() if not FENCE.match(line)).strip()
    return text[:1200] + (" ..." if len(text) > 1200 else "")


def read_reply(
    text: str,
    outputs: tuple[str, ...] = OUTPUT_NAMES,
    truncated: bool = False,
    max_tokens: int = 0,
    accept: Callable[[str], str] | None = None,
) -> Reply:
    """Take a formula from a reply. `truncated`: the reply stopped at the token limit (`max_tokens`); code running
    to its end is incomplete and never taken. `accept(code)` returns '' when the code parses and proves for the
    task, else why not: the first acceptable candidate wins, else the first one assigning an output (its check
    then says what is wrong)."""
    visible, thinking, closed = split_thinking(text)
    parts = sections(visible)
    own = [parts[name] for name in ("Memory analysis", "Code optimization reasoning") if parts.get(name)]
    reasoning = "\n\n".join(own) or _prose(visible)
    base = dict(text=text, truncated=truncated, sections=parts, reasoning=reasoning)
    limit = f" ({max_tokens} tokens)" if max_tokens else ""
    if not closed and not visible.strip():
        why = (f"the reply was cut at the token limit{limit} inside its <think> reasoning, before any formula"
               if truncated else "the reply's <think> reasoning never closed and nothing followed it")
        return Reply(**base, problem=why)
    found = []
    for cand in candidates(visible, truncated):
        code, note = from_kernel(cand.code)
        if assigned_outputs(code, outputs):
            found.append((cand, code, note))
    whole = [(c, code, note) for c, code, note in found if c.complete]
    if not whole:
        if found:
            return Reply(**base, problem=f"the reply was cut at the token limit{limit} inside its formula "
                                         f"({found[0][0].where} is incomplete)")
        return Reply(**base, problem=_no_formula(visible, outputs, truncated, limit))
    chosen = whole[0]
    if accept is not None:
        chosen = next((item for item in whole if not accept(item[1])), chosen)
    cand, code, note = chosen
    return Reply(**base, formula=code, where=cand.where + (f" ({note})" if note else ""))


def _no_formula(visible: str, outputs: tuple[str, ...], truncated: bool, limit: str) -> str:
    if truncated:
        return f"the reply was cut at the token limit{limit} before it wrote a formula"
    names = " or ".join(outputs)
    if fenced_blocks(visible) or code_runs(visible):
        return f"the reply's code never assigns {names} (a formula ends by assigning the tile ids the kernel reads)"
    return ("the reply has no code: no ```python block, no 'Swizzling formula:' section and no assignment lines "
            f"ending with {names}")
