"""A disk quota per sandboxed child: its folder is a filesystem of its own, of a fixed size (a sparse ext4 image
loop-mounted on it, else a tmpfs), so a submission fills its quota and never the host's disk.

Mounting needs root; where it cannot be done the run says so ("not applied") and only RLIMIT_FSIZE bounds a file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

IMAGE_NAME = ".quota.img"
# A folder counts as full below this much free space (ext4's own metadata takes a little of a small image).
FULL_MARGIN_BYTES = 8 << 20


@dataclass(frozen=True)
class Quota:
    """How a child's folder is limited: `kind` "loop" (ext4 image on the host's disk), "tmpfs" (in memory) or ""
    (not limited, `why` says why); `size` in bytes."""

    kind: str
    size: int
    why: str = ""

    def describe(self) -> str:
        gib = self.size / 2**30
        if self.kind == "loop":
            return f"disk quota {gib:.1f} GiB: the run's folder is a loop-mounted ext4 image of its own"
        if self.kind == "tmpfs":
            return f"disk quota {gib:.1f} GiB: the run's folder is a tmpfs of its own (held in memory)"
        return f"disk quota {gib:.1f} GiB: {self.why}"


# The quota of each folder this process mounted (or tried to), until remove_workdir.
_QUOTAS: dict[str, Quota] = {}


def quota_of(folder: Path) -> Quota | None:
    """The quota mount_quota gave `folder` (None: none was asked for)."""
    return _QUOTAS.get(str(folder))


def _run(argv: list[str]) -> str:
    """'' when the command succeeded, else its error in one line."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return f"{argv[0]}: {err}"
    if done.returncode == 0:
        return ""
    return f"{argv[0]}: " + (" ".join(done.stderr.split()) or f"exit {done.returncode}")[:200]


def mount_quota(folder: Path, size: int) -> Quota:
    """Make the empty `folder` a filesystem of `size` bytes (quota_of says which, later). Tries a loop-mounted
    ext4 image kept inside the folder (sparse: it takes host disk only as it fills; no journal, no reserved
    blocks), then a tmpfs."""
    quota = _mount(folder, size)
    _QUOTAS[str(folder)] = quota
    return quota


def _mount(folder: Path, size: int) -> Quota:
    if os.geteuid() != 0:
        return Quota("", size, "not applied (mounting needs root); only RLIMIT_FSIZE bounds each file")
    errors = []
    mkfs = shutil.which("mkfs.ext4") or ("/sbin/mkfs.ext4" if os.path.exists("/sbin/mkfs.ext4") else None)
    if mkfs and shutil.which("mount"):
        image = folder / IMAGE_NAME
        try:
            with open(image, "wb") as handle:
                handle.truncate(size)
        except OSError as err:
            errors.append(f"image: {err}")
        else:
            error = _run([mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
                          "lazy_itable_init=1,nodiscard", str(image)])
            error = error or _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(folder)])
            if not error:
                (folder / "lost+found").rmdir()
                return Quota("loop", size)
            errors.append(error)
            image.unlink(missing_ok=True)
    else:
        errors.append("no mkfs.ext4 or mount program")
    error = _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700,nosuid,nodev", "tmpfs", str(folder)])
    if not error:
        return Quota("tmpfs", size)
    errors.append(error)
    return Quota("", size, "not applied (" + "; ".join(errors) + "); only RLIMIT_FSIZE bounds each file")


def used_bytes(folder: Path) -> tuple[int, int]:
    """(bytes used, bytes free) of the filesystem holding `folder`; (0, 0) where it cannot be read."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return 0, 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize, stat.f_bavail * stat.f_frsize


def is_full(folder: Path) -> bool:
    used, free = used_bytes(folder)
    return used > 0 and free < FULL_MARGIN_BYTES


def unmount(folder: Path) -> None:
    """Unmount the folder's own filesystem if it has one (lazily when something still holds it open)."""
    if os.path.ismount(folder):
        if _run(["umount", str(folder)]):
            _run(["umount", "-l", str(folder)])


def remove_workdir(folder: Path) -> None:
    """Remove a child's folder: its quota filesystem unmounted first (the loop device goes with it), then the tree
    (with the image file under it)."""
    unmount(folder)
    shutil.rmtree(folder, ignore_errors=True)
    _QUOTAS.pop(str(folder), None)
