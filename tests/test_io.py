"""Atomic writes: readable modes like open(), the old content kept when a write fails, no temporary left over."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from swizzlelab.io import append_line, atomic_write_text


def test_new_file_mode_follows_the_umask_and_existing_mode_is_kept(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        report = atomic_write_text(tmp_path / "sub" / "report.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(report.stat().st_mode) == 0o644 and report.read_text() == "{}"
    report.chmod(0o600)
    atomic_write_text(report, "[1]")
    assert stat.S_IMODE(report.stat().st_mode) == 0o600 and report.read_text() == "[1]"
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.json"]


def test_failed_write_keeps_the_old_content(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "log.txt"
    atomic_write_text(target, "old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["log.txt"]


def test_append_line_adds_one_newline(tmp_path: Path) -> None:
    append_line(tmp_path / "a.jsonl", '{"a": 1}\n')
    append_line(tmp_path / "a.jsonl", '{"b": 2}')
    assert (tmp_path / "a.jsonl").read_text() == '{"a": 1}\n{"b": 2}\n'
