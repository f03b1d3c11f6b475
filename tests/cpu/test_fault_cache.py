"""The disk cache: damaged libraries are rebuilt instead of loaded, and the
directory stays under its size limit without evicting what a process uses."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import coreai_torch._C as C
import pytest
from support.child_process import child_env, run, spawn

# Runs kernel `tag` (one kernel per tag) and prints compiles and disk hits.
USE_KERNEL = """
import torch
from support.cpu_launch import Tensor, kernel
for tag in {tags!r}:
    source = f"// {{tag}}\\nout[id] = x[id] * 2.0f + 1.0f;"
    k = kernel("cached", [Tensor("x")], [Tensor("out")], source,
               [("id", "uint", "thread_position_in_grid")])
    x = torch.arange(64, dtype=torch.float32)
    (out,) = k(x, grid=(64, 1, 1), group=(32, 1, 1), shapes=[[64]])
    assert torch.equal(out, 2 * x + 1), out
print(torch.ops.coreai_torch.cpu_compile_count(), torch.ops.coreai_torch.cpu_disk_cache_hits())
"""


def _use(cache: Path, *tags: str, **env: str) -> tuple[int, int]:
    compiles, hits = run(USE_KERNEL.format(tags=list(tags)), child_env(cache, **env)).split()
    return int(compiles), int(hits)


def _libraries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.so"))


def _entry_bytes(library: Path) -> int:
    return library.stat().st_size + library.with_suffix(".cpp").stat().st_size


def _by_tag(cache: Path) -> dict[str, Path]:
    """Cached libraries by the tag their kept source starts with."""
    found = {}
    for library in _libraries(cache):
        source = library.with_suffix(".cpp").read_text()
        tag = source.split('#line 1 "src"\n', 1)[1].split("\n", 1)[0].removeprefix("// ")
        found[tag] = library
    return found


# ---- damaged files ---------------------------------------------------------------


def _sealed(payload: bytes, key: str) -> bytes:
    """`payload` with the seal line of cache key `key` (csrc/jit/seal.h)."""
    line = f"\n// coreai-kernel-v2 {len(payload):020d} {-1:+020d} {-1:+020d} {key} ".encode()
    return payload + line + hashlib.sha256(payload + line).hexdigest().encode() + b"\n"


def _truncate(library: Path, tmp_path: Path) -> None:
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 2])


def _overwrite_code(library: Path, tmp_path: Path) -> None:
    # int3 over the middle of the file (inside .text for these small
    # libraries): loading it unchecked would end in SIGTRAP.
    data = bytearray(library.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 256] = b"\xcc" * 256
    library.write_bytes(bytes(data))


def _other_abi(library: Path, tmp_path: Path) -> None:
    # Intact and sealed, loads, but built for another kernel ABI.
    source = tmp_path / "fake.c"
    source.write_text(
        "unsigned coreai_cpu_kernel_abi(void) { return 999; }\n"
        "void coreai_cpu_kernel_init(const void* r) { (void)r; }\n"
        "void coreai_cpu_kernel_run_group(void* const* a, const void* g) {}\n"
        "void coreai_cpu_kernel_run_thread(void* const* a, const void* g, const void* t) {}\n"
    )
    fake = tmp_path / "fake.so"
    subprocess.run(
        [C._cpu_compiler(), "-x", "c", "-shared", "-fPIC", "-o", str(fake), str(source)], check=True
    )
    library.write_bytes(_sealed(fake.read_bytes(), library.stem))


def test_damaged_cached_libraries_are_rebuilt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    damages = {"truncated": _truncate, "overwritten": _overwrite_code, "other-abi": _other_abi}
    assert _use(cache, *damages) == (3, 0)
    libraries = _by_tag(cache)
    for tag, damage in damages.items():
        damage(libraries[tag], tmp_path)
    # A new process rebuilds each, replaces the file and runs correctly. The
    # one that loaded and was rejected (other-abi; intact and sealed, so found
    # in the cache first) must not come back from the loader in place of the
    # library built for it: calling each kernel twice neither fails nor
    # compiles again.
    compiles, hits = _use(cache, *damages, *damages)
    assert compiles == 3 and hits <= 1
    # The next process finds intact libraries.
    assert _use(cache, *damages) == (0, 3)
    assert _by_tag(cache) == libraries


def _notes(cache: Path) -> list[Path]:
    """The cache's notes: the compiler check and the link command (never evicted)."""
    return [*cache.glob("compiler-*.txt"), *cache.glob("link-*.txt")]


def test_a_link_command_noted_before_the_system_libraries_moved_is_learned_again(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    assert _use(cache, "first") == (1, 0)
    (note,) = cache.glob("link-*.txt")
    command = note.read_text().splitlines()
    assert "{output}" in command and "{object}" in command
    # As after an upgrade of the C runtime: a start file the note names is gone.
    moved = [
        arg if not arg.endswith("crti.o") else str(tmp_path / "gone" / "crti.o") for arg in command
    ]
    assert moved != command
    note.write_text("\n".join(moved) + "\n")
    assert _use(cache, "second") == (1, 0)  # linked, and the note learned again
    assert note.read_text().splitlines() == command
    # A note that is not a link command is not used either.
    note.write_text("garbage\n")
    assert _use(cache, "third") == (1, 0)
    assert note.read_text().splitlines() == command


# ---- the size limit --------------------------------------------------------------


@pytest.fixture(scope="module")
def three_libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding the libraries of kernels k1, k2 and k3."""
    cache = tmp_path_factory.mktemp("three") / "cache"
    assert _use(cache, "k1", "k2", "k3") == (3, 0)
    return cache


def _copy(cache: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)  # keeps modes and modification times
    return copy


def test_the_least_recently_used_library_is_evicted_first(
    three_libraries: Path, tmp_path: Path
) -> None:
    cache = _copy(three_libraries, tmp_path)
    entries = _by_tag(cache)
    # A compile that a killed process left behind, and one still running, in
    # the cache's own directory of temporaries; and files of the user's that
    # look like temporaries or probes, which the cache did not write.
    stale = cache / "coreai-tmp" / "0123456789abcdef-1-2-3.so"
    fresh = cache / "coreai-tmp" / "fedcba9876543210-1-2-3.cpp"
    stale.write_bytes(b"left by a killed compile")
    fresh.write_bytes(b"a compile in progress")
    users = [cache / ".tmp-notes.txt", cache / "probe-results.cpp", cache / ("0" * 64 + ".ptx")]
    for f in users:
        f.write_bytes(b"the user's own file")
    for f in (stale, *users):
        os.utime(f, (time.time() - 7200, time.time() - 7200))
    # Recency: k2 oldest, then k3, then k1.
    for age, tag in ((300, "k2"), (200, "k3"), (100, "k1")):
        stamp = time.time() - age
        os.utime(entries[tag], (stamp, stamp))
        os.utime(entries[tag].with_suffix(".cpp"), (stamp, stamp))
    # Everything the cache counts: its sealed entries (the precompiled
    # prelude among them), not the user's look-alikes.
    total = sum(f.stat().st_size for f in cache.iterdir() if f.is_file() and f not in users)
    total -= sum(f.stat().st_size for f in _notes(cache))
    # Room for everything but one of the four entries.
    limit = total + min(_entry_bytes(p) for p in entries.values()) // 2
    assert _use(cache, "k4", COREAI_TORCH_CACHE_MAX_BYTES=str(limit)) == (1, 0)
    assert sorted(_by_tag(cache)) == ["k1", "k3", "k4"]
    assert not stale.exists() and fresh.exists()
    # Only what the cache wrote is deleted (recognised by its name and seal).
    assert all(f.exists() for f in users)


def test_a_library_the_process_loaded_is_never_evicted(
    three_libraries: Path, tmp_path: Path
) -> None:
    cache = _copy(three_libraries, tmp_path)
    # One byte: everything this process has not loaded goes. k1 is loaded
    # first and then made the oldest file; it must survive, and still run.
    code = USE_KERNEL.format(tags=["k1"]).replace(
        "print(",
        "import os, glob\n"
        "for p in glob.glob(os.environ['COREAI_TORCH_CACHE_DIR'] + '/*.so'): os.utime(p, (0, 0))\n"
        "print(",
        1,
    )
    code += USE_KERNEL.format(tags=["k5", "k1"])
    out = run(code, child_env(cache, COREAI_TORCH_CACHE_MAX_BYTES="1"))
    assert out.split() == ["0", "1", "1", "1"]
    assert sorted(_by_tag(cache)) == ["k1", "k5"]


def test_processes_evicting_while_another_loads_all_succeed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # Two processes with a limit that fits about one library evict each
    # other's work while a third, unlimited, loads and compiles shared kernels.
    tiny = child_env(cache, COREAI_TORCH_CACHE_MAX_BYTES="64K")
    children = [
        spawn(USE_KERNEL.format(tags=["a1", "a2", "a3", "s1"]), tiny),
        spawn(USE_KERNEL.format(tags=["b1", "b2", "b3", "s2"]), tiny),
        spawn(USE_KERNEL.format(tags=["s1", "s2", "s1", "s2", "s3"]), child_env(cache)),
    ]
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        compiles, hits = map(int, out.split())
        assert compiles + hits >= 3, out
