"""``python -m coreai_torch convert`` when things go wrong, each run in its own process.

A model file that exits, an output that cannot be written, and a run killed
halfway: every case ends with a clear message and a non-zero exit code, and no
staging directory is left behind (the next run removes a killed run's).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import coreai_torch
from coreai_torch.converter.asset_writer import staging_prefix

REPO = Path(coreai_torch.__file__).resolve().parents[1]

# A 256 x 256 float32 weight: the asset is about 260 KiB.
MODEL = textwrap.dedent(
    """
    import torch


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(256, 256)

        def forward(self, x):
            return self.linear(x)


    def get_model():
        torch.manual_seed(0)
        return Model()


    def example_inputs():
        return (torch.randn(2, 256),)
    """
)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def _convert(*args: str | Path, mount: str | None = None) -> subprocess.CompletedProcess:
    """Run the command; with ``mount``, after that shell command in a private mount namespace."""
    command = [sys.executable, "-m", "coreai_torch", "convert", *map(str, args)]
    if mount:
        script = f"{mount} && exec " + " ".join(shlex.quote(word) for word in command)
        command = ["unshare", "-m", "sh", "-c", script]
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)


def _litter(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".staging-" in p.name)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


@pytest.mark.parametrize(
    "where",
    [
        "import sys\nsys.exit(0)\n",
        "def get_model():\n    import sys\n    sys.exit(0)\n",
        "def example_inputs():\n    raise SystemExit(3)\n",
        "import os\nos._exit(0)\n",
    ],
    ids=["at-import", "in-get_model", "in-example_inputs", "os._exit"],
)
def test_model_file_that_exits_is_an_error(tmp_path: Path, model_file: Path, where: str) -> None:
    model_file.write_text(MODEL + "\n" + where)
    output = tmp_path / "out" / "model.aimodel"
    done = _convert(model_file, "-o", output)
    assert done.returncode == 1, done.stderr
    exit_call = "os._exit(0)" if "os._exit" in where else "sys.exit("
    assert f"{model_file} called {exit_call}" in done.stderr
    assert "Nothing was written" in done.stderr
    assert not output.exists()


def _mount_namespace() -> bool:
    """Whether this process may mount file systems in a private mount namespace."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def test_read_only_output_is_a_clear_error(tmp_path: Path, model_file: Path) -> None:
    target = tmp_path / "read-only"
    target.mkdir()
    output = target / "model.aimodel"
    if _mount_namespace():
        # Root ignores permission bits: make the directory a read-only mount.
        quoted = shlex.quote(str(target))
        done = _convert(model_file, "-o", output, mount=f"mount --bind -o ro {quoted} {quoted}")
        reason = "Read-only file system"
    elif os.geteuid() != 0:
        target.chmod(0o555)
        done = _convert(model_file, "-o", output)
        target.chmod(0o755)
        reason = "Permission denied"
    else:
        pytest.skip("running as root without mount namespaces: no way to make a read-only dir")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"error: cannot write {output}: {reason}"
    assert list(target.iterdir()) == []


def test_full_output_disk_is_a_clear_error(tmp_path: Path, model_file: Path) -> None:
    if not _mount_namespace():
        pytest.skip("a full disk is simulated with a small tmpfs, which needs a mount namespace")
    target = tmp_path / "small-disk"
    target.mkdir()
    output = target / "model.aimodel"
    # 128 KiB of room for an asset of about 260 KiB.
    mount = f"mount -t tmpfs -o size=128k tmpfs {shlex.quote(str(target))}"
    done = _convert(model_file, "-o", output, mount=mount)
    assert done.returncode == 1, done.stderr
    assert f"error: cannot write into {target}: the asset needs about" in done.stderr
    assert "KiB are free" in done.stderr
    assert "Traceback" not in done.stderr


KILLED_DURING_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    from coreai.authoring import AIProgram
    from coreai_torch.converter.cli import main

    save = AIProgram.save_asset

    def save_then_die(self, path, *args, **kwargs):
        save(self, path, *args, **kwargs)  # the whole asset, in the staging directory
        os.kill(os.getpid(), signal.SIGKILL)

    AIProgram.save_asset = save_then_die
    main(sys.argv[1:])
    """
)


def test_killed_run_leaves_staging_that_the_next_run_removes(
    tmp_path: Path, model_file: Path
) -> None:
    output = tmp_path / "out" / "model.aimodel"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_SAVE, str(model_file), "-o", str(output)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (staging,) = _litter(output.parent)
    assert staging.startswith(staging_prefix(output))
    left = sum(f.stat().st_size for f in (output.parent / staging).rglob("*") if f.is_file())
    assert left > 256 * 256 * 4  # the killed run's whole asset
    assert not output.exists()

    done = _convert(model_file, "-o", output)
    assert done.returncode == 0, done.stderr
    assert _litter(output.parent) == []
    assert sorted(p.name for p in output.iterdir()) == ["main.hash", "main.mlirb", "metadata.json"]


def test_staging_of_a_running_conversion_is_left_alone(tmp_path: Path, model_file: Path) -> None:
    output = tmp_path / "model.aimodel"
    busy = tmp_path / f"{staging_prefix(output)}busy"
    busy.mkdir()
    (busy / "partial.mlirb").write_bytes(b"\0" * 1024)
    fd = os.open(busy, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a conversion still writing would hold it
        done = _convert(model_file, "-o", output)
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert _litter(tmp_path) == [busy.name]
    assert (busy / "partial.mlirb").exists()
