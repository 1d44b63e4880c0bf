"""benchmarks/archive.py: a study's raw files listed with their hashes, packed into a reproducible raw.tar.xz, restored
from it or from git history, every restored byte checked against the manifest; and the committed manifests' shape."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks import archive


@pytest.fixture
def study(tmp_path, monkeypatch):
    """A study folder with two raw files in a manifest (added as new: in no commit), under a patched ROOT."""
    folder = tmp_path / "toy"
    (folder / "sub").mkdir(parents=True)
    (folder / "rows.json").write_text('{"device": "NVIDIA H100", "rows": [1, 2]}')
    (folder / "sub" / "log.txt").write_text("measured line\n")
    (folder / archive.MANIFEST).write_text(archive.manifest_text("toy", []))
    monkeypatch.setattr(archive, "ROOT", tmp_path)
    archive.add(folder, [str(folder / "rows.json"), str(folder / "sub" / "log.txt")])
    return folder


def test_pack_then_restore_gives_back_the_same_bytes(study):
    first = archive.pack(study).read_bytes()
    assert archive.pack(study).read_bytes() == first  # reproducible: same files, same archive
    (study / "rows.json").unlink()
    (study / "sub" / "log.txt").write_text("edited")
    assert archive.restore(study) == 2
    assert (study / "rows.json").read_text() == '{"device": "NVIDIA H100", "rows": [1, 2]}'
    assert (study / "sub" / "log.txt").read_text() == "measured line\n"
    assert archive.verify(study) == [] and archive.restore(study) == 0


def test_verify_names_a_changed_file_and_pack_refuses_it(study):
    (study / "rows.json").write_text("{}")
    assert archive.verify(study) == ["toy/rows.json: size or sha256 differs from raw.manifest.json"]
    with pytest.raises(archive.ArchiveError, match="1 differ"):
        archive.pack(study)


def test_restore_without_archive_or_commit_says_what_is_missing(study):
    (study / "rows.json").unlink()
    with pytest.raises(archive.ArchiveError, match="in no git commit and not in toy/raw.tar.xz"):
        archive.restore(study)


def test_an_archive_whose_member_differs_is_refused(study):
    archive.pack(study)
    files = archive.load_manifest(study)
    archive.write_manifest(study, [archive.RawFile(f.path, f.size, "0" * 64, None, None) if f.path == "rows.json"
                                   else f for f in files])
    assert "toy/raw.tar.xz: rows.json differs from raw.manifest.json" in archive.verify(study)
    (study / "rows.json").unlink()
    with pytest.raises(archive.ArchiveError, match="do not hash"):
        archive.restore(study)


def test_restore_from_git_history(study, tmp_path, monkeypatch):
    """A raw file that git held at some commit comes back with `git cat-file`, checked against its hash."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "old.json").write_text('{"device": "NVIDIA H100", "rows": [1, 2]}')
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "old.json"], check=True)
    subprocess.run([*git, "commit", "-qm", "raw"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setattr(archive, "REPO", repo)
    files = archive.load_manifest(study)

    def held_at(git_path: str) -> list[archive.RawFile]:
        return [archive.RawFile(f.path, f.size, f.sha256, commit, git_path) if f.path == "rows.json" else f
                for f in files]

    archive.write_manifest(study, held_at("old.json"))
    (study / "rows.json").unlink()
    assert archive.restore(study) == 1 and archive.verify(study) == []
    archive.write_manifest(study, held_at("gone.json"))
    (study / "rows.json").unlink()
    with pytest.raises(archive.ArchiveError, match="git has no"):
        archive.restore(study)


def test_add_refuses_a_file_outside_the_study(study, tmp_path):
    (tmp_path / "elsewhere.json").write_text("{}")
    with pytest.raises(archive.ArchiveError, match="not a file inside benchmarks/toy"):
        archive.add(study, [str(tmp_path / "elsewhere.json")])


def test_the_cli_gives_one_line_errors(capsys):
    assert archive.main(["restore", "no_such_study"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no_such_study: no raw.manifest.json") and err.count("\n") == 1


def test_committed_manifests_name_files_in_git_history_with_hashes():
    """Each committed manifest lists files with a size, a sha256 and where git last held them, none of them tracked."""
    for name in archive.studies():
        folder = archive.ROOT / name
        files = archive.load_manifest(folder)
        assert files and json.loads((folder / archive.MANIFEST).read_text())["study"] == name
        for f in files:
            assert f.size > 0 and len(f.sha256) == 64 and len(f.commit) == 40, (name, f.path)
            assert f.git_path.startswith("benchmarks/") and f.git_path.endswith(f.path.rsplit(".", 1)[-1]), f
