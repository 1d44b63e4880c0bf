"""Triton caches an evaluating process keeps between isolated runs, so a child does not rebuild what it built
before: the trusted kernels' (snapshotted before any submission code runs) and each submission code's own.

A child compiles trusted code into one folder and the submission into another; each run gets copies, never the
kept folders themselves, and a submission's cache only ever seeds runs of the same code (its secret run).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from swizzlelab.io import atomic_write_text

TRUSTED = "triton-trusted"  # the gate kernel, launcher stubs: compiled before the submission is imported
SUBMISSION = "triton"  # what the submission compiles
KEEP_CODES = 8  # submission caches kept (newest first)
# Library rows (the task's own implementations, timed like a submission) are kept this long by one evaluating
# process: they are trusted code on the same GPU, and timing them again per submission cost ~17 s of a ranked run
# on an H100 (two more children). Older rows are timed again, so a drifting clock or driver shows up within it.
LIBRARY_KEEP_S = 1800.0


def rehome(seed: Path, copy: Path) -> None:
    """Triton's group files name their members by absolute path: point them into the copy."""
    old, new = str(seed.resolve()), str(copy.resolve())
    for path in copy.rglob("*.json"):
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if old in text:
            path.write_text(text.replace(old, new))


def _only_plain(folder: str, names: list[str]) -> list[str]:
    """What a copy leaves out: links and special files. A kept cache was written by a submission: a link in it
    could point a root parent's copy (or chown) at any file of the host."""
    return [n for n in names if os.path.islink(os.path.join(folder, n))
            or not (os.path.isfile(os.path.join(folder, n)) or os.path.isdir(os.path.join(folder, n)))]


def copy_tree(source: Path, target: Path) -> None:
    """`source` copied to `target` (a fresh folder: plain files and folders only), its group files rehomed; an
    empty folder without a source."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, ignore=_only_plain)
        rehome(source, target)
    else:
        target.mkdir()


def code_key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:24]


class KeptCaches:
    """The kept folders of one evaluating process under `root` (None: nothing kept, every child builds all)."""

    def __init__(self, root: Path | None):
        self.root = root

    def trusted(self) -> Path | None:
        return self.root / TRUSTED if self.root is not None else None

    def of_code(self, code: str) -> Path | None:
        return self.root / f"code-{code_key(code)}" if self.root is not None else None

    def _replace(self, source: Path, target: Path) -> None:
        staging = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        copy_tree(source, staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)

    def keep_trusted(self, folder: Path) -> None:
        """Called between the child's start and the submission's import: only trusted code has compiled yet."""
        target = self.trusted()
        if target is not None and not target.exists() and folder.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
            self._replace(folder, target)

    def keep_code(self, code: str, folder: Path) -> None:
        """After a run: what this code compiled, for its next run (and never any other code's)."""
        target = self.of_code(code)
        if target is None or not folder.is_dir():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._replace(folder, target)
        kept = sorted(self.root.glob("code-*"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP_CODES:]:
            shutil.rmtree(old, ignore_errors=True)
        os.utime(target, (time.time(), time.time()))

    def _library_file(self, key: str) -> Path | None:
        return self.root / "library" / f"{key}.json" if self.root is not None else None

    def library(self, key: str) -> tuple[list[Any], float] | None:
        """The kept library rows under `key` and their age in seconds, if kept less than LIBRARY_KEEP_S ago."""
        path = self._library_file(key)
        if path is None or not path.is_file():
            return None
        try:
            kept = json.loads(path.read_text())
            age = time.time() - float(kept["timed_at"])
            rows = kept["rows"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(rows, list) or not 0 <= age < LIBRARY_KEEP_S:
            return None
        return rows, age

    def keep_library(self, key: str, rows: list[Any]) -> None:
        path = self._library_file(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"timed_at": time.time(), "rows": rows}))
