"""Jinja2 environment of the leaderboard pages: templates, number/time filters, and code highlighting.

Autoescape is on for every template, so user strings (names, file names, stdout) always render as text.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from swizzlelab.harness.ncu import NAMED_METRICS
from swizzlelab.harness.report import case_line, fmt_metric, fmt_ms, fmt_std

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
# Static files are named in pages with ?v=<this> so browsers may cache them for a long time.
STATIC_VERSION = "1"


def lb_url(task: str, gpu: str) -> str:
    return f"/lb/{quote(task, safe='')}/{quote(gpu, safe='')}"


def user_url(name: str) -> str:
    return f"/users/{quote(name, safe='')}"


def submission_url(submission_id: int) -> str:
    return f"/submissions/{int(submission_id)}"


def static_url(name: str) -> str:
    return f"/static/{name}?v={STATIC_VERSION}"


def when(value: datetime | None, default: str = "–") -> str:
    """'2025-12-02 14:28:54 UTC'; naive datetimes are taken as UTC (SQLite drops the zone)."""
    if value is None:
        return default
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def ms(value: float | None) -> str:
    """A time in ms as the harness's reports print it ('0.3152'); '–' where there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt_ms(float(value))


def ms_std(value: float | None) -> str:
    if value is None:
        return "–"
    return fmt_std(float(value))


def metric(value: float | None, unit: str) -> str:
    return fmt_metric(value, unit)


def case_text(case: dict[str, Any] | None, seed: int | None = None) -> str:
    return case_line(case or {}, seed)


_FORMATTER = HtmlFormatter(cssclass="highlight", linenos="table")


@lru_cache(maxsize=64)
def highlight_python(code: str) -> Markup:
    """Pygments escapes every character of the source, so the result may be inserted as markup. Cached: many
    submissions share code (stored once by content), and highlighting costs more than the page's queries."""
    return Markup(highlight(code, PythonLexer(), _FORMATTER))


@lru_cache(maxsize=1)
def pygments_css() -> str:
    """Light style by default, a dark one under prefers-color-scheme: dark."""
    light = HtmlFormatter(style="default").get_style_defs(".highlight")
    dark = HtmlFormatter(style="github-dark").get_style_defs(".highlight")
    table = ".highlighttable{width:auto}.highlighttable td{border:0;padding:0}.linenos{opacity:.5;user-select:none}\n"
    return f"{table}{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"


NAMED = [{"name": name, "metric": metric_id, "unit": unit} for name, metric_id, _, unit in NAMED_METRICS]


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters.update(ms=ms, ms_std=ms_std, when=when, metric=metric, case_line=case_text)
    env.globals.update(
        lb_url=lb_url, user_url=user_url, submission_url=submission_url, static_url=static_url,
        named_metrics=NAMED, refresh_s=None, viewer=None,
    )
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
