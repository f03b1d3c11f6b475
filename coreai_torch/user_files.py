"""Running a Python file named on the command line (``check FILE``, ``convert MODEL``).

Such a file may end the process itself: an unguarded ``unittest.main()`` at its
top level calls ``sys.exit``, and some scripts call ``os._exit``. The command
would then stop with the file's status, often 0, having checked or written
nothing, and a CI gate would pass. While the file (and what the command calls
in it) runs, both ways out raise :class:`UserFileExited` instead, so the
command reports that it did not do its work.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class UserFileExited(Exception):
    """The user's file tried to end the process before the command was done."""

    def __init__(self, path: Path | str, how: str) -> None:
        super().__init__(f"{path} called {how}")
        self.path = path
        self.how = how


@contextmanager
def exits_raise(path: Path | str) -> Iterator[None]:
    """Within the block, ``sys.exit`` and ``os._exit`` raise :class:`UserFileExited`.

    ``os._exit`` cannot be caught, so it is replaced for the duration; a child
    process the file forks still exits as it asks (its pid differs).

    >>> import sys
    >>> with exits_raise("model.py"):
    ...     sys.exit(0)
    Traceback (most recent call last):
    ...
    coreai_torch.user_files.UserFileExited: model.py called sys.exit(0)
    """
    real_exit = os._exit
    pid = os.getpid()

    def refuse(status: int) -> None:
        if os.getpid() != pid:
            real_exit(status)
        raise UserFileExited(path, f"os._exit({status!r})")

    os._exit = refuse
    try:
        yield
    except SystemExit as exit_:
        raise UserFileExited(path, f"sys.exit({exit_.code!r})") from None
    finally:
        os._exit = real_exit
