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
- Only a Core AI asset (a directory holding only the files Core AI's serializer
  writes) or an empty directory at the destination is replaced. A file, another
  directory and a symbolic link (dangling or not) are refused with an error that
  names them, and nothing is created. The old asset is moved into the staging
  directory before the new one takes its place and checked again there, so
  something put at the destination during the conversion is not deleted either.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Room for the program text and the asset's metadata, beyond the tensor data.
_SIZE_MARGIN = 64 << 10

# What coreai-core's AIProgram.save_asset writes into an asset directory (the
# program under the name "main" whatever its entry points are called).
_ASSET_FILES = frozenset({"main.hash", "main.mlirb", "metadata.json"})


class AssetWriteError(OSError):
    """The asset could not be written; the message says where and why."""


def staging_prefix(destination: Path) -> str:
    """The name every staging directory of ``destination`` starts with."""
    return f".{destination.name}.staging-"


def write_asset_atomically(program: Any, destination: Path, data_bytes: int = 0) -> None:
    """Save ``program`` (an ``AIProgram``) to ``destination``, an ``.aimodel`` directory.

    ``data_bytes`` (the size of the program's constants, if known) lets a disk
    that is too full be refused up front. An existing asset at ``destination``
    is replaced; until the new one is complete, the old one stays. Anything
    else there is refused (:func:`destination_refusal`) with ``AssetWriteError``.
    """
    # The directories above may be links (resolved); the destination itself is not followed.
    destination = destination.absolute().parent.resolve() / destination.name
    refusal = destination_refusal(destination)
    if refusal is not None:
        raise AssetWriteError(errno.EEXIST, refusal)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(destination)
        _check_free_space(destination.parent, data_bytes + _SIZE_MARGIN)
        with _locked_staging(destination) as staging:
            built = staging / destination.name
            program.save_asset(built)
            _replace(destination, built, staging / _previous_name(destination))
    except AssetWriteError:
        raise
    except Exception as exc:
        reason = _os_error(exc)
        if reason is None:
            raise
        raise AssetWriteError(
            reason.errno, f"cannot write {destination}: {reason.strerror or reason}"
        ) from exc


def destination_refusal(destination: Path) -> str | None:
    """Why ``destination`` must not be written (or replaced), or None if it may be.

    It may be written if nothing is there, or an empty directory, or a Core AI
    asset; the directories above it must be directories or not exist yet.
    """
    if not os.path.lexists(destination):
        return _parent_refusal(destination)
    problem = _not_an_asset(destination)
    if problem is None:
        return None
    return f"{destination} {problem}; {_LEFT_ALONE}"


_LEFT_ALONE = "it is left as it is: write the asset elsewhere, or move it away first"


def _not_an_asset(path: Path) -> str | None:
    """What ``path`` is if it is not a Core AI asset or an empty directory, else None."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        dangling = "" if os.path.exists(path) else " (which does not exist)"
        return (
            f"is a symbolic link to {os.readlink(path)}{dangling}, and an asset is not "
            "written through a link"
        )
    if not stat.S_ISDIR(info.st_mode):
        return "is a file, not a Core AI asset"
    foreign = _foreign_entries(path)
    if not foreign:
        return None
    more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
    return f"is a directory that is not a Core AI asset (it holds {', '.join(foreign[:5])}{more})"


def _parent_refusal(destination: Path) -> str | None:
    """Why the directories above a ``destination`` that does not exist cannot hold it."""
    for parent in destination.absolute().parents:
        if os.path.lexists(parent):
            if os.path.isdir(parent):
                return None
            return f"cannot write {destination}: {parent} is not a directory"
    return None


def _foreign_entries(directory: Path) -> list[str]:
    """What ``directory`` holds that Core AI's serializer does not write (empty: an asset)."""
    from coreai.authoring import AIModelAsset

    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        return [f"entries that cannot be listed ({exc.strerror})"]
    foreign = [
        name
        for name in entries
        if name not in _ASSET_FILES or not stat.S_ISREG(os.lstat(directory / name).st_mode)
    ]
    if entries and not foreign and not AIModelAsset.is_valid(directory):
        foreign = [f"{', '.join(entries)}, which Core AI does not read as an asset"]
    return foreign


def _replace(destination: Path, built: Path, previous: Path) -> None:
    """Rename ``built`` to ``destination``; what was there goes to ``previous``.

    A directory cannot be replaced in one rename, so the old asset is moved
    into the staging directory first (it is deleted with it). It is checked
    again once there, where nothing else can swap it: what took its place since
    ``destination_refusal`` looked is put back, and the write refused.
    """
    try:
        os.rename(destination, previous)  # moves a link itself, never its target
    except FileNotFoundError:
        pass
    else:
        problem = _not_an_asset(previous)
        if problem is not None:
            if not os.path.lexists(destination):
                os.rename(previous, destination)
            raise AssetWriteError(errno.EEXIST, f"{destination} {problem}; {_LEFT_ALONE}")
    os.rename(built, destination)


def remove_stale_staging(destination: Path) -> list[Path]:
    """Remove the staging directories of ``destination`` whose writer is gone; return them."""
    removed = []
    prefix = staging_prefix(destination)
    for candidate in destination.parent.glob(f"{prefix}*"):
        if not _is_staging(candidate, destination):
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


def _previous_name(destination: Path) -> str:
    # The asset a write replaces, in its staging directory; Core AI recognises
    # an asset by its extension too.
    return f"previous{destination.suffix}"


def _is_staging(candidate: Path, destination: Path) -> bool:
    """Whether ``candidate`` is what a writer of ``destination`` made: a directory of
    this user's holding at most the asset being built and the one it replaced."""
    try:
        info = os.lstat(candidate)
        entries = set(os.listdir(candidate)) if stat.S_ISDIR(info.st_mode) else None
    except OSError:
        return False
    return (
        entries is not None
        and info.st_uid == os.getuid()
        and entries <= {destination.name, _previous_name(destination)}
    )


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
