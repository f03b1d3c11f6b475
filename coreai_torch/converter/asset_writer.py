"""Writing ``.aimodel`` assets so that a failed or killed run leaves nothing behind.

An asset is a directory, built by Core AI's serializer, so it cannot be written
in one system call. It is built in a hidden staging directory beside the
destination (same file system, so the final rename is atomic) named
``.<asset name>.staging-<random>``, and renamed into place.

- A failure while writing (read-only or full disk, no permission) raises
  :class:`AssetWriteError` with the reason, after the staging directory is
  removed.
- The serializer ends the process itself when the disk fills up mid-write
  (an LLVM fatal error), and a killed run (``SIGKILL``, power loss) cannot clean
  up either. So the staging directory is locked (``flock``) for as long as its
  writer lives, and every write to the same destination first removes the
  staging directories whose lock is free: those of writers that are gone. A
  staging directory of a conversion still running is left alone.
- Before writing, the free space is compared with what the program's tensors
  need, so that a disk that is too full is reported before the serializer runs
  into it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Room for the program text and the asset's metadata, beyond the tensor data.
_SIZE_MARGIN = 64 << 10


class AssetWriteError(OSError):
    """The asset could not be written; the message says where and why."""


def staging_prefix(destination: Path) -> str:
    """The name every staging directory of ``destination`` starts with."""
    return f".{destination.name}.staging-"


def write_asset_atomically(program: Any, destination: Path, data_bytes: int = 0) -> None:
    """Save ``program`` (an ``AIProgram``) to ``destination``, an ``.aimodel`` directory.

    ``data_bytes`` (the size of the program's constants, if known) lets a disk
    that is too full be refused up front. An existing asset at ``destination``
    is replaced; until the new one is complete, the old one stays.
    """
    destination = destination.resolve()
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(destination)
        _check_free_space(destination.parent, data_bytes + _SIZE_MARGIN)
        with _locked_staging(destination) as staging:
            built = staging / destination.name
            program.save_asset(built)
            if destination.exists():
                # A directory cannot be replaced in one rename: move the old
                # one into the staging directory first; it goes with it.
                os.replace(destination, staging / "previous")
            os.replace(built, destination)
    except AssetWriteError:
        raise
    except Exception as exc:
        reason = _os_error(exc)
        if reason is None:
            raise
        raise AssetWriteError(
            reason.errno, f"cannot write {destination}: {reason.strerror or reason}"
        ) from exc


def remove_stale_staging(destination: Path) -> list[Path]:
    """Remove the staging directories of ``destination`` whose writer is gone; return them."""
    removed = []
    prefix = staging_prefix(destination)
    for candidate in destination.parent.glob(f"{prefix}*"):
        if not candidate.is_dir() or candidate.is_symlink():
            continue
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # its writer is still running
            continue
        try:
            shutil.rmtree(candidate)
            removed.append(candidate)
        finally:
            os.close(fd)
    return removed


@contextmanager
def _locked_staging(destination: Path):
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(destination), dir=destination.parent))
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # Held until this process ends, however it ends: the kernel drops it.
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(fd)


def _check_free_space(directory: Path, needed: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise AssetWriteError(
            errno.ENOSPC,
            f"cannot write into {directory}: the asset needs about {_readable(needed)} and "
            f"only {_readable(free)} are free",
        )


def _readable(size: int) -> str:
    if size < 10 << 20:
        return f"{size >> 10} KiB"
    return f"{size / (1 << 20):.0f} MiB"


def _os_error(exc: BaseException) -> OSError | None:
    """The operating-system error behind ``exc`` (Core AI wraps them in RuntimeError)."""
    while exc is not None:
        if isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
