"""Running a test scenario in a process of its own.

Faults that used to kill the process (a stack overflow, an integer division
trap, a corrupt cached library) and scenarios that need their own environment
(a compiler wrapper, a cache limit, SIGINT) run in a child, so that a
regression fails one test with the child's output instead of taking pytest down.

Children are forked from a server that has imported torch and coreai_torch
already (support/fork_server.py), which saves each one the seconds of those
imports; ``fresh=True`` starts a new interpreter instead, for what happens
before or during the imports (cold start, import time).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from support.fork_server import ForkedChild, ForkServer

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]

# Prepended to every fresh child: the checkout's coreai_torch and the test
# helpers, and Python's SIGINT handler even where the test process was started
# with SIGINT ignored (a background job), as in a foreground interpreter.
PRELUDE = f"""
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{str(REPO)!r}, {str(TESTS)!r}]
"""

_SERVER = ForkServer([str(REPO), str(TESTS)], preload=("support.cpu_launch",))


def child_env(cache: Path, **extra: str) -> dict[str, str]:
    """The test process's environment with a private kernel cache and `extra`."""
    return {**os.environ, "COREAI_TORCH_CACHE_DIR": str(cache), **extra}


def spawn(code: str, env: dict[str, str], *, fresh: bool = False) -> subprocess.Popen | ForkedChild:
    """Starts `code` (dedented) in a child; stdout and stderr are pipes.

    The child is forked from the fork server unless ``fresh`` is set or ``env``
    changes what coreai_torch reads at import; then it is a new interpreter.
    """
    if not fresh and _SERVER.serves(env):
        return _SERVER.spawn(textwrap.dedent(code), env)
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class LineReader:
    """The lines a child prints, each awaited with a time limit, so that a
    child that hangs fails the test instead of hanging it (the child is killed)."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.child.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output

    def next(self, timeout: float = 120) -> str:
        try:
            return self._lines.get(timeout=timeout).strip()
        except queue.Empty:
            self.child.kill()
            raise AssertionError(f"the child printed nothing for {timeout} s") from None

    def finish(self, timeout: float = 120) -> list[str]:
        """The remaining lines, once the child exited with status 0."""
        try:
            self.child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            raise AssertionError(f"the child did not exit within {timeout} s") from None
        err = self.child.stderr.read()
        assert self.child.returncode == 0, f"exit status {self.child.returncode}\n{err}"
        rest = []
        while (line := self.next()) != "":
            rest.append(line)
        return rest


def run(code: str, env: dict[str, str], timeout: float = 300, *, fresh: bool = False) -> str:
    """Runs `code` to the end; asserts a zero exit status and returns its stdout."""
    p = spawn(code, env, fresh=fresh)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"exit status {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return out
