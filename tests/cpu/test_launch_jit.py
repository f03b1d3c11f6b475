"""The CPU backend's JIT: source rewriting, compile errors, caches, compiler discovery."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import coreai_torch._C as C
import pytest
import torch
from support.child_process import child_env, run
from support.cpu_launch import Tensor, kernel

GID = [("id", "uint", "thread_position_in_grid")]
TESTS = Path(__file__).resolve().parents[1]  # holds the support package


# ---- the address-space pass and the fiber-mode scan ------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "threadgroup float tile[16][16];",
            "COREAI_THREADGROUP_STORAGE float coreai_threadgroup_tile[16][16]; "
            "const ::coreai::threadgroup_ptr<float[16]> tile = coreai_threadgroup_tile;",
        ),
        ("threadgroup float a[4], b[4];", "COREAI_THREADGROUP_STORAGE float a[4], b[4];"),
        ("threadgroup metal::atomic<int> n;", "COREAI_THREADGROUP_STORAGE metal::atomic<int> n;"),
        ("threadgroup float* p = tile;", "::coreai::threadgroup_ptr<float> p = tile;"),
        ("void f(threadgroup const half& r);", "void f(            const half& r);"),
        (
            "auto q = (threadgroup float4*)p;",
            "auto q = (::coreai::threadgroup_ptr<float4>)p;",
        ),
        (
            "const device T* a, constant int* b",
            "::coreai::device_ptr<const T> a, ::coreai::constant_ptr<const int> b",
        ),
        ("device float *a, *b;", "::coreai::device_ptr<float>a,  b;"),
        (
            "auto p = reinterpret_cast<device half4*>(q);",
            "auto p = ::coreai::pointer_cast<::coreai::device_ptr<half4>>(q);",
        ),
        (
            "tensor<threadgroup half, dextents<int, 2>> t",
            "tensor<            half, dextents<int, 2>> t",
        ),
        ("device float& r = x[0];", None),  # device is a macro on references
        # The kernel's own parameters stay plain pointers: the launcher binds them.
        ("[[kernel]] void k(device float* x [[buffer(0)]]) {}", None),
        ("threadgroup_barrier(mem_flags::mem_threadgroup);", None),
        ("// threadgroup float x[4];\n", None),
        ('const char* s = "threadgroup float x[4];";', None),
        ("#define TG threadgroup float\n", None),
    ],
)
def test_address_space_pass(source: str, expected: str | None) -> None:
    assert C._rewrite_address_spaces(source) == (source if expected is None else expected)


def test_address_space_pass_keeps_every_line() -> None:
    source = (
        "a\nthreadgroup float t[2];\n/* threadgroup\n */ threadgroup int* p;\n"
        "const device\nfloat* q;\n"
    )
    out = C._rewrite_address_spaces(source)
    assert out.count("\n") == source.count("\n")
    assert out.splitlines()[1].startswith(
        "COREAI_THREADGROUP_STORAGE float coreai_threadgroup_t[2];"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("namespace metal {\nint f();\n}\n", "\nint f();\n \n"),
        ("namespace metal::detail { int g(); }", "namespace detail { int g(); }"),
        # Another namespace's metal, and using-directives, are left alone.
        ("namespace mlx { namespace metal { int h(); } }", None),
        ("using namespace metal;", None),
        # The kernel's own namespaces live in namespace metal (PyTorch's
        # c10/metal/utils.h writes ::c10::metal::opmath_t).
        (
            "namespace c10 { namespace metal { using T = int; } }\n"
            "template <class U> ::c10::metal::T f(typename ::c10::metal::T);",
            "namespace c10 { namespace metal { using T = int; } }\n"
            "template <class U> ::metal::c10::metal::T f(typename ::metal::c10::metal::T);",
        ),
        (
            "namespace a { int x; }\n#define X ::a::x\n",
            "namespace a { int x; }\n#define X ::metal::a::x\n",
        ),
        (
            "namespace a { int x; }\nconstant ::a::T& r = v;",
            "namespace a { int x; }\nconstant ::metal::a::T& r = v;",
        ),
        # Not a namespace of the source, a member of a class, a using-directive.
        ("int y = ::std::max(1, 2) + ::b::z;", None),
        ("namespace a { int x; }\nint y = B::a::x;", None),
        ("using namespace c;\nint y = ::c::x;", None),
    ],
)
def test_metal_namespace_reopening_is_merged(source: str, expected: str | None) -> None:
    assert C._drop_metal_namespace_reopening(source) == (source if expected is None else expected)


@pytest.mark.parametrize(
    ("source", "fibers"),
    [
        ("out[id] = x[id];", False),
        ("uint simd_lane_id = 3; uint quad_id = 1;", False),  # names, not calls
        ("// simd_sum(x)\n", False),
        ("threadgroup_barrier(mem_flags::mem_none);", True),
        ("float s = simd_sum (x);", True),
        ("float s = quad_broadcast(x, 0);", True),
        ("#define SUM(x) simd_sum(x)\n", True),  # a macro body counts
        ("simdgroup_multiply_accumulate(c, a, b, c);", True),
        ("simdgroup_load(m, p, 8);", True),
        ("auto d = simdgroup_matrix<float, 8, 8>(1.0f);", True),
        ("simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8>(0.f);", False),
        ("matmul2d<desc, execution_simdgroups<4>> op;", True),
        ("matmul2d<desc, execution_thread> op;", False),
    ],
)
def test_fiber_mode_scan(source: str, fibers: bool) -> None:
    assert C._needs_fibers(source) is fibers


# ---- compile errors ----------------------------------------------------------------


def test_compile_error_points_at_the_users_line() -> None:
    k = kernel(
        "broken",
        [Tensor("x")],
        [Tensor("out")],
        "float v = x[id];\nout[id] = v + undefined_name;",
        GID,
        helper="inline float twice(float v) { return 2.0f * v; }",
    )
    with pytest.raises(RuntimeError) as info:
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    message = str(info.value)
    assert message.startswith("MetalCompileError: kernel 'broken'"), message
    assert "src:2:" in message and "undefined_name" in message


def test_compile_error_in_helper_source() -> None:
    k = kernel(
        "broken_helper",
        [Tensor("x")],
        [Tensor("out")],
        "out[id] = twice(x[id]);",
        GID,
        helper="// a helper\ninline float twice(float v) { return 2.0f * v }",
    )
    with pytest.raises(
        RuntimeError, match=r"MetalCompileError: kernel 'broken_helper'(.|\n)*helper_src:2:"
    ):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    # The failure is remembered: no second compile.
    count = torch.ops.coreai_torch.cpu_compile_count()
    with pytest.raises(RuntimeError, match="MetalCompileError"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    assert torch.ops.coreai_torch.cpu_compile_count() == count


def test_mpp_convolution_is_refused_with_a_reason() -> None:
    k = kernel(
        "uses_mpp_convolution",
        [Tensor("x")],
        [Tensor("out")],
        "constexpr auto desc = convolution2d_descriptor(3, 3);\nout[id] = x[id];",
        GID,
    )
    with pytest.raises(RuntimeError, match="convolution2d is not supported by the CPU backend"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])


def test_compile_error_through_torch_metal_kernel() -> None:
    from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel

    def ref(x: torch.Tensor) -> torch.Tensor:
        return x

    k = TorchMetalKernel(
        "tmk_broken",
        ["x"],
        ["out"],
        "out[id] = x[id] +;",
        ref,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )
    with pytest.raises(MetalCompileError, match=r"tmk_broken(.|\n)*src:1:"):
        k(
            torch.ones(4),
            threads_per_grid=(4, 1, 1),
            threads_per_thread_group=(4, 1, 1),
            result_shapes=[[4]],
        )


# ---- tensor views ----------------------------------------------------------------------


def test_tensor_view_indexing_forms() -> None:
    k = kernel(
        "views",
        [Tensor("x", rank=3)],
        [Tensor("out", rank=3), Tensor("info", torch.int32)],
        """
        metal::array<uint, x.get_rank()> idx;
        idx[0] = gid.x; idx[1] = gid.y; idx[2] = gid.z;
        metal::array<int, 3> sidx{int(gid.x), int(gid.y), int(gid.z)};
        const short sx = short(gid.x);
        const long ly = long(gid.y);
        const size_t sz = gid.z;
        out[idx] = x[sx, ly, sz] + x[sidx] + x[gid.x, gid.y, gid.z];
        if (gid.x == 0 && gid.y == 0 && gid.z == 0) {
            static_assert(decltype(x)::get_rank() == 3);
            info[0] = x.get_extent(0); info[1] = x.get_extent(1); info[2] = x.get_extent(2);
            info[3] = x.get_stride(0); info[4] = x.get_stride(1); info[5] = x.get_stride(2);
        }
        """,
        [("gid", "uint3", "thread_position_in_grid")],
    )
    x = torch.randn(4, 6, 5).permute(2, 0, 1)  # torch [5, 4, 6], not contiguous
    out, info = k(x, grid=(6, 4, 5), group=(4, 4, 2), shapes=[[5, 4, 6], [6]])
    torch.testing.assert_close(out, 3 * x)
    assert info.tolist() == [6, 4, 5, x.stride(2), x.stride(1), x.stride(0)]


# ---- caches ------------------------------------------------------------------------------


def test_repeated_launches_do_not_compile_again() -> None:
    # A unique comment makes a source no earlier run has cached.
    k = kernel(
        "counted",
        [Tensor("x")],
        [Tensor("out")],
        f"// {uuid.uuid4()}\nout[id] = x[id] * 2.0f;",
        GID,
    )
    compiles = torch.ops.coreai_torch.cpu_compile_count()
    x = torch.arange(8, dtype=torch.float32)
    k(x, grid=(8, 1, 1), group=(8, 1, 1), shapes=[[8]])
    assert torch.ops.coreai_torch.cpu_compile_count() == compiles + 1
    hits = torch.ops.coreai_torch.cpu_disk_cache_hits()
    for _ in range(20):
        (out,) = k(x, grid=(8, 1, 1), group=(8, 1, 1), shapes=[[8]])
    assert torch.ops.coreai_torch.cpu_compile_count() == compiles + 1
    assert torch.ops.coreai_torch.cpu_disk_cache_hits() == hits
    torch.testing.assert_close(out, 2 * x)


CHILD = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    from support.cpu_launch import Tensor, kernel
    k = kernel("child", [Tensor("x")], [Tensor("out")], "// {tag}\\nout[id] = x[id] + 1.0f;",
               [("id", "uint", "thread_position_in_grid")])
    x = torch.arange(100, dtype=torch.float32)
    (out,) = k(x, grid=(100, 1, 1), group=(32, 1, 1), shapes=[[100]])
    assert torch.equal(out, x + 1)
    print(torch.ops.coreai_torch.cpu_compile_count(), torch.ops.coreai_torch.cpu_disk_cache_hits())
    """
)


def _child(cache: Path, tag: str, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "COREAI_TORCH_CACHE_DIR": str(cache), **env}
    code = CHILD.format(tests=str(TESTS), tag=tag)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(p: subprocess.Popen) -> str:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return out.strip()


def test_disk_cache_is_used_by_a_new_process_and_is_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tag = str(uuid.uuid4())
    assert _finish(_child(cache, tag)) == "1 0"  # compiled
    assert _finish(_child(cache, tag)) == "0 1"  # loaded from disk
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    libraries = list(cache.glob("*.so"))
    assert len(libraries) == 1
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in cache.iterdir() if f.is_file())
    # The temporaries' directory: private, and empty once the compile is done.
    assert stat.S_IMODE((cache / "coreai-tmp").stat().st_mode) == 0o700
    assert not list((cache / "coreai-tmp").iterdir())


def test_two_processes_compiling_the_same_kernel_both_succeed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tag = str(uuid.uuid4())
    children = [_child(cache, tag) for _ in range(2)]
    results = [_finish(c) for c in children]
    assert all(r in ("1 0", "0 1") for r in results)
    assert len(list(cache.glob("*.so"))) == 1
    assert not list((cache / "coreai-tmp").iterdir())


def test_xdg_cache_home_is_honoured(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COREAI_TORCH_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    code = "import coreai_torch._C as C; print(C._cpu_cache_directory())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == str(tmp_path / "xdg" / "coreai_torch")


# ---- compiler discovery ------------------------------------------------------------------


def test_unusable_explicit_compiler_is_named(tmp_path: Path) -> None:
    p = _child(tmp_path, "explicit", COREAI_TORCH_CXX="/nonexistent/clang++")
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert "COREAI_TORCH_CXX names /nonexistent/clang++" in err and "not found" in err


def test_missing_compiler_says_how_to_install_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COREAI_TORCH_CXX", "CXX")}
    env.update(PATH=str(tmp_path / "empty"), COREAI_TORCH_CACHE_DIR=str(tmp_path))
    code = CHILD.format(tests=str(TESTS), tag="no compiler")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode != 0
    assert "kernel 'child'" in p.stderr
    assert "clang++-19 (PATH): not found" in p.stderr
    assert "apt-get install clang-19" in p.stderr and "xcode-select --install" in p.stderr


@pytest.mark.skipif(sys.platform == "darwin", reason="g++ is Apple clang on macOS")
def test_a_gcc_is_not_taken_for_clang(tmp_path: Path) -> None:
    p = _child(tmp_path, "gcc", COREAI_TORCH_CXX="g++")
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "not clang" in err


# ---- the headers themselves ------------------------------------------------------------


def test_every_msl_header_compiles_on_its_own() -> None:
    msl = Path(C._msl_directory())
    headers = [
        "coreai_msl.h",
        "metal_stdlib",
        "metal_tensor",
        "MetalPerformancePrimitives/MetalPerformancePrimitives.h",
    ]
    headers += [
        f"coreai_msl/{name}.h"
        for name in (
            "core",
            "cpu_abi",
            "cuda_abi",
            "debug_checks",
            "entry",
            "runtime",
            "sync",
            "tensor",
        )
    ]
    flags = [
        "-std=c++23",
        "-fsyntax-only",
        "-Xclang",
        "-ffloat16-excess-precision=none",
        "-I",
        str(msl),
    ]
    for header in headers:
        source = f"#include <coreai_msl.h>\n#include <{header}>\n"
        if header.startswith("coreai_msl/") or header == "coreai_msl.h":
            source = f"#include <{header}>\n"
        p = subprocess.run(
            [C._cpu_compiler(), *flags, "-x", "c++", "-"],
            input=source,
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, (header, p.stderr)


def test_a_cache_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    p = _child(cache, "shared cache")
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0
    # Making it private now would keep what others planted: a new one is advised.
    assert "writable by others (mode 0777)" in err and "a new directory" in err
    assert "chmod" not in err


FORK_WHILE_COMPILING = """
import os, threading, time, uuid
import torch
from coreai_torch import MetalParameter, TorchMetalKernel

def triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3

# A source no cache has seen: its first launch compiles (a fraction of a second).
kernel = TorchMetalKernel(
    "fork_compile", ["x"], ["out"], f"// {uuid.uuid4().hex}\\nout[id] = x[id] * 3.0f;", triple,
    metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")])
x = torch.arange(8.0)
CALL = dict(threads_per_grid=(8, 1, 1), threads_per_thread_group=(8, 1, 1), result_shapes=[[8]])
compiles = torch.ops.coreai_torch.cpu_compile_count()
thread = threading.Thread(target=lambda: kernel(x, **CALL))
thread.start()
# The count goes up as the compiler starts: fork while it runs.
while torch.ops.coreai_torch.cpu_compile_count() == compiles and thread.is_alive():
    time.sleep(0.001)
assert thread.is_alive(), "compiled too fast to test"
pid = os.fork()
if pid == 0:
    # The child has none of the parent's threads: its call compiles afresh.
    code = 0 if torch.equal(kernel(x, **CALL), x * 3) else 3
    os._exit(code)
thread.join()
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise SystemExit("the forked child's call hung")
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
print("ok")
"""


def test_a_child_forked_during_a_compile_compiles_afresh(tmp_path: Path) -> None:
    # A process that forked while a thread compiled kernel K: the child's call
    # of K used to wait forever for the parent's compile (issue 29.10). Now it
    # compiles K itself and returns K's results.
    out = run(FORK_WHILE_COMPILING, child_env(tmp_path), timeout=300)
    assert out.strip().splitlines()[-1] == "ok", out
