"""Raw benchmark data kept out of git: each study lists its raw files (size, sha256, the commit that last held them)
in raw.manifest.json, packs them into raw.tar.xz (gitignored), restores them from it or from git, verifies them.

    python benchmarks/archive.py verify [STUDY ...]     hashes of the raw files and archives present (all studies)
    python benchmarks/archive.py restore STUDY ...      from STUDY/raw.tar.xz, else `git show COMMIT:PATH`
    python benchmarks/archive.py pack STUDY ...         the raw files (all present, all verified) -> STUDY/raw.tar.xz
    python benchmarks/archive.py add STUDY PATH ...     new raw files into the manifest (commit: null, archive only)
    python benchmarks/archive.py summarize STUDY ...    STUDY/summary.py on the raw files -> STUDY/summary.json
Stdlib only, like check_results.py, so that the checks run on a bare clone.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent  # the git checkout whose history holds the raw files' last committed versions
MANIFEST = "raw.manifest.json"
ARCHIVE = "raw.tar.xz"
SUMMARY = "summary.json"
# Imported as benchmarks.archive (tests) or as archive (python benchmarks/archive.py): studies follow suit.
PACKAGE = f"{__package__}." if __package__ else ""


class ArchiveError(Exception):
    """A raw-data operation that cannot go on; its message is one line saying what to do."""


@dataclass(frozen=True)
class RawFile:
    """One raw file of a study: `path` inside the study folder; `commit` and `git_path` (from the repository root)
    say where git last held it (None: only in the study's archive)."""

    path: str
    size: int
    sha256: str
    commit: str | None
    git_path: str | None


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def studies() -> list[str]:
    """The study folders that keep raw data out of git (those with a manifest)."""
    return sorted(p.parent.name for p in ROOT.glob(f"*/{MANIFEST}"))


def study_dir(study: str) -> Path:
    folder = ROOT / study
    if not (folder / MANIFEST).is_file():
        raise ArchiveError(f"{study}: no {MANIFEST} in benchmarks/{study} (studies with raw data: {', '.join(studies())})")
    return folder


def load_manifest(folder: Path) -> list[RawFile]:
    doc = json.loads((folder / MANIFEST).read_text())
    return [RawFile(**entry) for entry in doc["files"]]


def manifest_text(study: str, files: list[RawFile]) -> str:
    """The manifest as committed: one file a line, sorted by path, so that a change reads as a small diff."""
    rows = ",\n".join("  " + json.dumps(asdict(f)) for f in sorted(files, key=lambda f: f.path))
    head = json.dumps({"study": study, "archive": ARCHIVE,
                       "restore": f"python benchmarks/archive.py restore {study}"})[:-1]
    return f'{head}, "files": [\n{rows}\n]}}\n'


def write_manifest(folder: Path, files: list[RawFile]) -> None:
    write_bytes(folder / MANIFEST, manifest_text(folder.name, files).encode())


def write_bytes(path: Path, data: bytes) -> None:
    """Write through a temporary file beside `path`, so that an interrupted restore leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def raw_state(folder: Path) -> tuple[list[RawFile], list[str]]:
    """The raw files present in `folder` and one line per present file whose size or hash is not the manifest's."""
    present, problems = [], []
    for f in load_manifest(folder):
        path = folder / f.path
        if not path.is_file():
            continue
        present.append(f)
        if path.stat().st_size != f.size or file_sha256(path) != f.sha256:
            problems.append(f"{folder.name}/{f.path}: size or sha256 differs from {MANIFEST}")
    return present, problems


def archive_members(folder: Path) -> dict[str, bytes]:
    with tarfile.open(folder / ARCHIVE, "r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def verify(folder: Path) -> list[str]:
    """Problems of the raw data present: files whose hash differs, an archive that lacks a file or holds another."""
    files = load_manifest(folder)
    _, problems = raw_state(folder)
    if (folder / ARCHIVE).is_file():
        members = archive_members(folder)
        for f in files:
            if f.path not in members:
                problems.append(f"{folder.name}/{ARCHIVE}: lacks {f.path}")
            elif sha256_of(members[f.path]) != f.sha256:
                problems.append(f"{folder.name}/{ARCHIVE}: {f.path} differs from {MANIFEST}")
        extra = sorted(set(members) - {f.path for f in files})
        if extra:
            problems.append(f"{folder.name}/{ARCHIVE}: files not in {MANIFEST}: {extra[:5]}")
    return problems


def git_blob(commit: str, git_path: str) -> bytes:
    done = subprocess.run(["git", "-C", str(REPO), "cat-file", "blob", f"{commit}:{git_path}"], capture_output=True)
    if done.returncode != 0:
        raise ArchiveError(f"git has no {commit[:12]}:{git_path} here ({done.stderr.decode().strip()}); "
                           f"a shallow clone lacks it: git fetch --unshallow, or put the study's {ARCHIVE} in place")
    return done.stdout


def restore(folder: Path) -> int:
    """Write every raw file that is missing or differs, from the archive if present, else from git; returns how many
    were written. Every file is checked against the manifest before it is written."""
    files = load_manifest(folder)
    members = archive_members(folder) if (folder / ARCHIVE).is_file() else {}
    written = 0
    for f in files:
        path = folder / f.path
        if path.is_file() and path.stat().st_size == f.size and file_sha256(path) == f.sha256:
            continue
        if f.path in members:
            data = members[f.path]
        elif f.commit and f.git_path:
            data = git_blob(f.commit, f.git_path)
        else:
            raise ArchiveError(f"{folder.name}/{f.path}: in no git commit and not in {folder.name}/{ARCHIVE}")
        if sha256_of(data) != f.sha256:
            raise ArchiveError(f"{folder.name}/{f.path}: the restored bytes do not hash to {MANIFEST}'s sha256")
        write_bytes(path, data)
        written += 1
    return written


def pack(folder: Path) -> Path:
    """A reproducible raw.tar.xz of the study's raw files (sorted, mtime 0, no owner), all present and verified."""
    files = load_manifest(folder)
    present, problems = raw_state(folder)
    if problems or len(present) != len(files):
        raise ArchiveError(f"{folder.name}: {len(files) - len(present)} raw file(s) missing, {len(problems)} differ; "
                           f"restore them first (python benchmarks/archive.py restore {folder.name})")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in sorted(files, key=lambda f: f.path):
            info = tarfile.TarInfo(f.path)
            info.size, info.mtime, info.mode = f.size, 0, 0o644
            tar.addfile(info, io.BytesIO((folder / f.path).read_bytes()))
    write_bytes(folder / ARCHIVE, lzma.compress(buffer.getvalue(), preset=6))
    return folder / ARCHIVE


def add(folder: Path, paths: list[str]) -> list[RawFile]:
    """Raw files written since the manifest (a new GPU run) into it; they live in the archive only, so pack next."""
    files = {f.path: f for f in load_manifest(folder)}
    for name in paths:
        path = Path(name).resolve()
        if not path.is_file() or folder.resolve() not in path.parents:
            raise ArchiveError(f"{name}: not a file inside benchmarks/{folder.name}")
        rel = path.relative_to(folder.resolve()).as_posix()
        files[rel] = RawFile(rel, path.stat().st_size, file_sha256(path), None, None)
    write_manifest(folder, list(files.values()))
    return list(files.values())


def summary_text(folder: Path) -> str:
    """The study's summary.json as its summary.py builds it from the raw files (all present)."""
    module = importlib.import_module(f"{PACKAGE}{folder.name}.summary")
    return json.dumps(module.summarize(folder), indent=1) + "\n"


def complete(folder: Path) -> bool:
    """Whether every raw file of the study is present (not whether it verifies: see raw_state)."""
    return all((folder / f.path).is_file() for f in load_manifest(folder))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["verify", "restore", "pack", "add", "summarize"])
    parser.add_argument("study", nargs="*", help="study folder names (verify: all when none), or for add: STUDY PATH...")
    args = parser.parse_args(argv)
    try:
        if args.action == "add":
            if len(args.study) < 2:
                raise ArchiveError("add needs a study and at least one file")
            files = add(study_dir(args.study[0]), args.study[1:])
            print(f"{args.study[0]}: {len(files)} raw files in {MANIFEST}; run pack to put them in {ARCHIVE}")
            return 0
        names = args.study or (studies() if args.action == "verify" else [])
        if not names:
            raise ArchiveError(f"{args.action} needs a study: one of {', '.join(studies())}")
        failed = 0
        for name in names:
            folder = study_dir(name)
            if args.action == "verify":
                present, _ = raw_state(folder)
                problems = verify(folder)
                archive = "archive present" if (folder / ARCHIVE).is_file() else "no archive"
                print(f"{name}: {len(present)}/{len(load_manifest(folder))} raw files present, {archive}, "
                      f"{len(problems)} problem(s)")
                for line in problems:
                    print(f"  {line}")
                failed += bool(problems)
            elif args.action == "restore":
                print(f"{name}: {restore(folder)} raw file(s) written, all {len(load_manifest(folder))} verified")
            elif args.action == "pack":
                path = pack(folder)
                print(f"{name}: {path.relative_to(ROOT.parent)} ({path.stat().st_size / 1e6:.2f} MB)")
            else:
                if not complete(folder):
                    raise ArchiveError(f"{name}: raw files missing; python benchmarks/archive.py restore {name}")
                write_bytes(folder / SUMMARY, summary_text(folder).encode())
                print(f"{name}: {SUMMARY} written")
        return 1 if failed else 0
    except ArchiveError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
