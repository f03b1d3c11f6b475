"""Metal fidelity: what the Metal compiler refuses, the CPU backend refuses at
compile time, naming the construct, its line in the user's source and the
section of the Metal Shading Language specification (csrc/cpu/metal_fidelity.h)."""

from __future__ import annotations

import pytest
import torch
from support.cpu_launch import Tensor, kernel, registration

from coreai_torch import _C as C

GID = [("id", "uint", "thread_position_in_grid")]
LID = [*GID, ("lid", "uint", "thread_index_in_threadgroup")]

RESTRICTIONS = r'MSL specification §1\.5\.4 "Restrictions"'

# (construct, helper_src, src, position the error names, what it says)
CASES = [
    (
        "double",
        "",
        "out[id] = x[id];\ndouble d = x[id];\nout[id] = float(d);",
        "src:2:1",
        r"'double': Metal has no double-precision type; use float \(MSL specification §2\.1",
    ),
    (
        "recursion",
        "float fact(uint n) {\n  return n == 0 ? 1.0f : n * fact(n - 1);\n}",
        "out[id] = fact(id % 5);",
        "helper_src:1:7",
        r"a recursive function \(fact\(unsigned int\)\): Metal does not support recursive "
        r"function calls \(" + RESTRICTIONS,
    ),
    (
        "recursion through a lambda passed itself",
        "",
        "auto fact = [](auto self, uint n) -> float {\n"
        "  return n == 0 ? 1.0f : n * self(self, n - 1);\n};\nout[id] = fact(fact, id % 5);",
        "src:1:13",
        r"a recursive function \(.*operator\(\).*\): Metal does not support recursive",
    ),
    (
        "recursion in a local struct",
        "",
        "struct F {\n  static float fact(uint n) { return n == 0 ? 1.0f : n * fact(n - 1); }\n};\n"
        "out[id] = F::fact(id % 5);",
        "src:2:16",
        r"a recursive function \(.*F::fact\(unsigned int\)\): Metal does not support recursive",
    ),
    (
        "new",
        "",
        "thread float* p = new float[4];\nout[id] = x[id];",
        "src:1:19",
        r"'new': Metal has no dynamic memory allocation.*" + RESTRICTIONS,
    ),
    (
        "delete",
        "void drop(thread float* p) { delete p; }",
        "out[id] = x[id];",
        "helper_src:1:30",
        r"'delete': Metal has no dynamic memory allocation",
    ),
    (
        "standard library",
        "",
        "out[id] = std::max(x[id], 0.0f);",
        "src:1:11",
        r"'std': Metal has no C\+\+ standard library; Metal's own is namespace metal",
    ),
    (
        "standard header",
        "#include <vector>",
        "out[id] = x[id];",
        "helper_src:1:1",
        r"#include <vector>: not a Metal header",
    ),
    (
        "virtual",
        "struct Shape {\n  virtual float area() const { return 1.0f; }\n};",
        "out[id] = x[id];",
        "helper_src:2:3",
        r"'virtual': Metal has no virtual functions \(" + RESTRICTIONS,
    ),
    (
        "exceptions",
        "",
        "if (x[id] < 0) throw 1;\nout[id] = x[id];",
        "src:1:16",
        r"'throw': Metal has no exceptions",
    ),
    (
        "goto",
        "",
        "if (id > 100) goto end;\nout[id] = x[id];\nend:;",
        "src:1:15",
        r"'goto': Metal has no goto statement",
    ),
    (
        "asm",
        "",
        'asm volatile("nop");\nout[id] = x[id];',
        "src:1:1",
        r"'asm': Metal has no inline assembly",
    ),
    (
        "C library, qualified",
        "",
        'out[id] = x[id];\n::puts("hi");',
        "src:2:1",
        r"'::puts': a C library function; Metal has no C library",
    ),
    (
        "C library, unqualified",
        "",
        'out[id] = x[id];\nprintf("%f", x[id]);',
        "src:2:1",
        r"call to deleted function 'printf': Metal has no C library and no printf "
        r"\(MSL specification 1\.5\.4, Restrictions\)",
    ),
    (
        "pointer without an address space",
        "float first(float* p) { return p[0]; }",
        "out[id] = x[id];",
        "helper_src:1:18",
        r"'float\*': a pointer without an address space; Metal requires one on every pointer "
        r".*MSL specification §4 \"Address Spaces\"",
    ),
    (
        "threadgroup memory beyond 32 KiB",
        "",
        "threadgroup float a[4096];\nthreadgroup float b[8192];\n"
        "a[id] = x[id];\nb[id] = x[id];\nout[id] = a[id] + b[id];",
        "src:1",
        r"threadgroup memory of 49152 bytes, more than the 32768 bytes a Metal kernel may "
        r"declare \(MSL specification §4\.4.*'a' 16384 bytes \(src:1\), 'b' 32768 bytes \(src:2\)",
    ),
    (
        "variable-length array",
        "",
        "uint n = id + 1;\nfloat v[n];\nv[0] = x[id];\nout[id] = v[0];",
        "src:2:9",
        r"variable length arrays",
    ),
    # Ways around the checks above, each closed.
    (
        "#line naming another file",
        "",
        'out[id] = x[id];\n#line 1 "generated_signature"\ndouble d = x[id];',
        "src:2:1",
        r'#line 1 "generated_signature": a #line directive in src or helper_src may name only '
        r"src or helper_src",
    ),
    (
        "digraph include",
        "%:include <cstdio>",
        "out[id] = x[id];",
        "helper_src:1:1",
        r"#include <cstdio>: not a Metal header",
    ),
    (
        "include continued over two lines",
        "#include <cst\\\ndio>",
        "out[id] = x[id];",
        "helper_src:1:1",
        r"#include <cstdio>: not a Metal header",
    ),
    (
        "include of a file",
        '#include "/etc/hostname"',
        "out[id] = x[id];",
        "helper_src:1:1",
        r'#include "/etc/hostname": a kernel compiled from source .* has no files to include',
    ),
    (
        "include of a macro",
        "#define HEADER <cstdio>\n#include HEADER",
        "out[id] = x[id];",
        "helper_src:2:1",
        r"#include HEADER: an include named by a macro",
    ),
    (
        "asm by token pasting",
        "#define PASTE(a, b) a##b",
        'PASTE(a, sm) volatile("nop");\nout[id] = x[id];',
        "src:1:1",
        r"'asm' \(made by a macro\): Metal has no inline assembly",
    ),
    (
        "double from a macro",
        "#define REAL double",
        "REAL d = x[id];\nout[id] = float(d);",
        "src:1:1",
        r"'double' \(made by a macro\): Metal has no double-precision type",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_construct_metal_refuses_is_refused_with_its_line_and_section(case) -> None:
    construct, helper, body, where, says = case
    name = "fidelity_" + "".join(c if c.isalnum() else "_" for c in construct)
    k = kernel(name, [Tensor("x")], [Tensor("out")], body, LID, helper=helper)
    with pytest.raises(RuntimeError, match=rf"(?s)kernel '{name}'.*{where}:.*error: {says}"):
        k(torch.ones(4), grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])


def test_switching_fidelity_off_runs_what_only_the_cpu_can(monkeypatch) -> None:
    monkeypatch.setenv("COREAI_TORCH_METAL_FIDELITY", "0")
    k = kernel(
        "fidelity_off_double",
        [Tensor("x")],
        [Tensor("out")],
        "double d = x[id];\nout[id] = float(d * 3.0);",
        GID,
    )
    x = torch.arange(6.0)
    (out,) = k(x, grid=(6, 1, 1), group=(2, 1, 1), shapes=[[6]])
    torch.testing.assert_close(out, 3 * x, rtol=0, atol=0)  # exact: small integers


def test_metal_constructs_with_similar_words_are_accepted() -> None:
    # `thread float*`, a threadgroup array in the body, `= delete`, a struct with
    # a pointer member in an address space, a member named like a C function.
    helper = """
struct Acc {
  float total;
  Acc() = default;
  Acc(const thread Acc&) = default;
  void add(float v) { total += v; }
};
float first(const device float* p) { return p[0]; }
float twice(thread float* p) { return 2 * *p; }
"""
    body = """
threadgroup float tile[4];
tile[lid] = x[id];
threadgroup_barrier(mem_flags::mem_threadgroup);
Acc acc;
acc.total = 0;
acc.add(tile[(lid + 1) % 4]);
float v = acc.total;
out[id] = twice(&v) + first(x.get_data_ptr()) * 0;
"""
    k = kernel("fidelity_metal_ok", [Tensor("x")], [Tensor("out")], body, LID, helper=helper)
    x = torch.arange(4.0)
    (out,) = k(x, grid=(4, 1, 1), group=(4, 1, 1), shapes=[[4]])
    torch.testing.assert_close(out, 2 * x.roll(-1), rtol=0, atol=0)  # exact: small integers


def test_compile_errors_carry_no_inliner_remarks() -> None:
    k = kernel(
        "fidelity_error_clean",
        [Tensor("x")],
        [Tensor("out")],
        "out[id] = undefined_name(x[id]);",
        GID,
    )
    with pytest.raises(RuntimeError, match=r"src:1:11: error: use of undeclared") as info:
        k(torch.ones(2), grid=(2, 1, 1), group=(2, 1, 1), shapes=[[2]])
    assert "remark:" not in str(info.value)


@pytest.mark.parametrize(
    ("helper", "body", "may_recurse"),
    [
        # What most kernels are: no function of the user's, so no remarks asked for.
        ("", "if (id < out.get_extent(0)) out[id] = x[id] * 2.0f;", False),
        (
            "",
            "float acc = 0.0f;\nfor (uint i = 0; i < 4; ++i) { acc += float(x[i]) * 0.5f; }\n"
            "threadgroup_barrier(mem_flags::mem_none);\nout[id] = max(acc, static_cast<float>(0));",
            False,
        ),
        ("#include <metal_stdlib>\nusing namespace metal;", "out[id] = x[id];", False),
        # Anything that can define a function that calls itself.
        ("float f(float v) { return v; }", "out[id] = f(x[id]);", True),
        ("", "auto f = [](auto self, uint n) { return n; };\nout[id] = f(f, id);", True),
        ("", "auto f = [&]<class T>(T v) { return v; };\nout[id] = f(x[id]);", True),
        ("", "struct S { float v; };\nout[id] = x[id];", True),
        ("", "auto f = [](this auto s) { return 1.0f; };\nout[id] = f();", True),
        ("#define DEF(n) float n(float v) { return v; }\nDEF(g)", "out[id] = g(x[id]);", True),
        ("", "out[id] = x[id]; if (id == 99) NAME(x, out, nullptr, id);", True),
    ],
)
def test_which_kernels_are_compiled_with_the_inliner_remarks(helper, body, may_recurse) -> None:
    # The remarks that find recursion cost a few milliseconds of every compile:
    # a kernel whose text can define no function is compiled without them.
    args = registration(
        "fidelity_remarks", [Tensor("x")], [Tensor("out")], body, GID, helper=helper
    )
    entry = args[2]
    rendering = args[1].replace("NAME", entry)  # a call of the kernel by its own name
    assert C._metal_may_recurse(rendering, entry) is may_recurse
