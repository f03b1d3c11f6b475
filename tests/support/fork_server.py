"""Child processes forked from an interpreter that has already imported torch.

A test that needs a process of its own (a fault that used to kill the
process, an environment of its own, a signal) would start a new interpreter
and import torch and coreai_torch again: about three seconds each, most of a
typical such test. ``spawn`` instead asks a server process, started once per
test process, to fork a child from its already-imported state; the child runs
the code as ``python -c`` would, with the environment and working directory
given.

The server imports and nothing else: it compiles no kernel, starts no thread
and runs no parallel region, so a fork of it is what a new interpreter would
be after its imports. Tests about what a new interpreter does before or
during its imports (cold start, import time, an environment variable read at
import) start a real one (``child_process.spawn(..., fresh=True)``).

Protocol: one Unix-socket connection per child. The client sends a JSON
request with the child's stdin, stdout and stderr as file descriptors
(``socket.send_fds``); the server answers with the child's pid, and later
with its exit status (``os.waitstatus_to_exitcode``) when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

# Variables that coreai_torch reads once, at import: a child whose value
# differs from the server's must be a fresh interpreter.
READ_AT_IMPORT = ("COREAI_TORCH_EXECUTION_MODE",)

_SERVER = r"""
import json, os, selectors, signal, socket, sys, traceback
sys.path[:0] = json.loads(sys.argv[2])
import torch
import coreai_torch
for name in json.loads(sys.argv[3]):
    __import__(name)


def serve(path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
                while not message.endswith(b"\n"):
                    message += conn.recv(1 << 16)
                pid = os.fork()
                if pid == 0:
                    for other in list(sel.get_map().values()):
                        if other.data is not None:
                            os.close(other.fd)
                            other.data[1].close()
                    sel.close()
                    listener.close()
                    conn.close()
                    return json.loads(message), fds
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                sel.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
                except OSError:
                    pass
                conn.close()


request, fds = serve(sys.argv[1])
# The child: what `python -c CODE` would be, after the server's imports.
for target, fd in zip((0, 1, 2), fds):
    os.dup2(fd, target)
    os.close(fd)
sys.stdin = open(0, closefd=False)
sys.stdout = open(1, "w", closefd=False)
sys.stderr = open(2, "w", closefd=False)
os.environ.clear()
os.environ.update(request["env"])
os.chdir(request["cwd"])
sys.argv = ["-c"]
# The client may have SIGINT ignored (a background job): a child gets
# Python's own handler, as a new interpreter started in the foreground does.
signal.signal(signal.SIGINT, signal.default_int_handler)
code = request["code"]
del serve, request, fds, target, fd
status = 0
try:
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
except SystemExit as exit_:
    if exit_.code is None or isinstance(exit_.code, int):
        status = exit_.code or 0
    else:
        print(exit_.code, file=sys.stderr)
        status = 1
except BaseException:
    sys.excepthook(*sys.exc_info())
    status = 1
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        status = -signal.SIGINT  # Python ends by the signal, as a new interpreter would
import atexit
atexit._run_exitfuncs()
sys.stdout.flush()
sys.stderr.flush()
# Finalizing an interpreter that imported torch takes about a second and
# checks nothing a test asks about; what the code registered with atexit ran.
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
os._exit(status & 0xFF)
"""


class ForkedChild:
    """A forked child, with the part of ``subprocess.Popen``'s interface tests use."""

    def __init__(self, conn: socket.socket, stdout: IO[str], stderr: IO[str]) -> None:
        self._conn = conn
        self._answers = conn.makefile("r")
        self.pid = int(self._answers.readline())
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> int:
        with self._lock:
            if self.returncode is None:
                self._conn.settimeout(timeout)
                try:
                    line = self._answers.readline()
                except TimeoutError:
                    raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout) from None
                self.returncode = int(line)
                self._answers.close()
                self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Everything the child writes to stdout and stderr, once it has exited."""
        out: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()), daemon=True)
            for k, f in (("out", self.stdout), ("err", self.stderr))
        ]
        for r in readers:
            r.start()
        self.wait(timeout)
        for r in readers:
            r.join(timeout)
        return out.get("out", ""), out.get("err", "")


class ForkServer:
    """A server process that forks children from its imports (see the module docstring)."""

    def __init__(self, path_entries: list[str], preload: tuple[str, ...] = ()) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="coreai-fork-server-")
        self.socket_path = str(Path(self._dir.name) / "server")
        self.path_entries = path_entries
        self.preload = preload
        self._process: subprocess.Popen | None = None
        self._env: dict[str, str] = {}
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        self._env = dict(os.environ)
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SERVER,
                self.socket_path,
                json.dumps(self.path_entries),
                json.dumps(list(self.preload)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = process.stdout.readline().strip()
        if ready != "ready":
            process.kill()
            raise RuntimeError(f"the fork server did not start (it printed {ready!r})")
        atexit.register(self.close)
        return process

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a child with ``env`` can be forked: nothing read at import differs."""
        base = self._env if self._process is not None else os.environ
        return all(env.get(name) == base.get(name) for name in READ_AT_IMPORT)

    def spawn(self, code: str, env: dict[str, str], cwd: str | None = None) -> ForkedChild:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.socket_path)
        request: dict[str, Any] = {"code": code, "env": env, "cwd": cwd or os.getcwd()}
        try:
            # One line of JSON (newlines inside strings are escaped), the descriptors with it.
            line = json.dumps(request).encode() + b"\n"
            socket.send_fds(conn, [line], [stdin, stdout_w, stderr_w])
        finally:
            for fd in (stdin, stdout_w, stderr_w):
                os.close(fd)
        return ForkedChild(conn, open(stdout_r), open(stderr_r))

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._dir.cleanup()
