"""The docs site and the front door: `mkdocs build --strict` passes, the CLI reference page is what the typer app
renders, and every link in README.md and docs/ resolves (relative files and their anchors; no network)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
# Pages another branch is writing: a link to one may point nowhere while the file is absent, and is checked like any
# other once it is there (test_pages_written_elsewhere_are_still_absent then asks for the entry to go).
WRITTEN_ELSEWHERE: dict[str, str] = {}
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""")
FENCE = re.compile(r"^\s*(```|~~~)")


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks, inline code spans blanked."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slugs(text: str) -> set[str]:
    """The anchors of a page's headings, as MkDocs (Python-Markdown's toc) and GitHub make them."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        match = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).replace("`", "").replace("*", "")
        ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
        mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_title).strip().lower())
        github = re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))
        for slug in {mkdocs, github}:
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each link of `page` whose file or anchor does not exist (web addresses are not followed)."""
    problems = []
    for number, line in enumerate(prose(page.read_text()), 1):
        for target in LINK.findall(line) + HTML_LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            rel = resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None
            if not resolved.exists():
                if rel not in WRITTEN_ELSEWHERE:
                    problems.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in slugs(resolved.read_text()):
                problems.append(f"{where}: no heading with that anchor")
    return problems


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_in_readme_and_docs_resolves() -> None:
    problems = [p for page in pages() for p in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A title, with `code`\n\n## Step 2: the task kernel (6.4 ms)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-title-with-code) [ok](other.md#step-2-the-task-kernel-64-ms) [web](https://x.y)\n"
                    "[gone](missing.md) [bad anchor](other.md#nothing) ![img](pic.png)\n"
                    "```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)` <a href=\"lost.md\">x</a>\n")
    found = broken_links(page, tmp_path)
    assert [p.split(": ", 1)[1] for p in found] == ["missing.md: no such file", "other.md#nothing: no heading with "
                                                    "that anchor", "pic.png: no such file", "lost.md: no such file"]


def test_pages_written_elsewhere_are_still_absent() -> None:
    there = [name for name in WRITTEN_ELSEWHERE if (ROOT / name).exists()]
    assert not there, f"{there} exist now: drop them from WRITTEN_ELSEWHERE, their links are checked like the rest"


SETUP = ("python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 'triton==3.6.*' && pip install -e "
         "'.[test]' && ")


def test_the_readme_is_a_front_door() -> None:
    """At most 120 lines, one picture, the two set-up commands as CI and the issue state them, and the three paths."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    for command in ("swizzlelab optimize matmul --target mi300x --budget 20", "python -m pytest -q"):
        assert f"\n{SETUP}{command}\n" in text, command
    assert len(re.findall(r"!\[[^\]]*\]\(docs/screenshots/[^)]+\.png\)", text)) == 1
    assert [h for h in re.findall(r"^## (\d)\. ", text, flags=re.M)] == ["1", "2", "3"]


def test_the_cli_reference_page_is_what_the_app_renders() -> None:
    module = _cli_reference()
    assert (ROOT / "docs" / "cli.md").read_text() == module.render(), "python docs/hooks/cli_reference.py"


def test_a_stale_cli_reference_page_stops_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _cli_reference()
    page = tmp_path / "cli.md"
    page.write_text(module.render().replace("## swizzlelab simulate", "## swizzlelab simulated"))
    monkeypatch.setattr(module, "PAGE", page)
    with pytest.raises(PluginError, match="cli_reference.py"):
        module.on_pre_build(None)


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "swizzlelab optimize" in (site / "cli" / "index.html").read_text()
    assert (site / "screenshots" / "submission-suggestion-section.png").is_file()
