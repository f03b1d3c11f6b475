"""Construction and call validation of TorchMetalKernel: exception types and messages."""

from __future__ import annotations

import collections
import inspect
import shutil
import subprocess
import warnings

import pytest
import torch

from coreai_torch import _C, MetalParameter, TorchMetalKernel, definition
from coreai_torch.contract import Specialization, TensorArg, render_coreai_source

ID = [MetalParameter("id", "uint", "thread_position_in_grid")]
CALL = {"threads_per_grid": (4, 1, 1), "threads_per_thread_group": (4, 1, 1)}


def unary(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def binary(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def make(name="val_k", inputs=("x",), results=("out",), defn=unary, **kw):
    return TorchMetalKernel(
        name,
        list(inputs),
        list(results),
        kw.pop("src", "out[id] = x[id];"),
        defn,
        metal_params=kw.pop("metal_params", ID),
        **kw,
    )


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_name_must_be_non_blank_string(name):
    with pytest.raises(ValueError, match="non-empty string"):
        make(name=name)


def test_name_must_be_identifier():
    with pytest.raises(ValueError, match="'my-kernel' is not a valid identifier"):
        make(name="my-kernel")


def test_result_names_not_empty():
    with pytest.raises(ValueError, match="kernel 'val_k': result_names must contain at least one"):
        make(results=())


@pytest.mark.parametrize(
    ("inputs", "results", "message"),
    [
        (("x", "x"), ("out",), r"duplicate input names \['x'\]"),
        (("x",), ("out", "out"), r"duplicate result names \['out'\]"),
        (("x",), ("x",), r"names \['x'\] appear in both"),
        (("1x",), ("out",), "input name '1x' is not a valid Metal identifier"),
        (("x",), ("float",), "result name 'float' is a reserved word"),
        (("coreai_meta",), ("out",), "reserved for the names coreai_torch generates"),
    ],
)
def test_io_names(inputs, results, message):
    with pytest.raises(ValueError, match=message):
        make(inputs=inputs, results=results)


# ------------------------------------------------ names (issue 9, 2.10)


@pytest.mark.parametrize("name", ["__init__", "None", "lambda", "True", "name", "_dir", "__call__"])
def test_kernel_names_that_cannot_name_an_op(name):
    # torch.ops.coreai_metal_kernels.<name> must be reachable and printable as
    # Python (exported graphs print it).
    with pytest.raises(ValueError, match=f"Kernel name '{name}' cannot name a torch op"):
        make(name=name)


@pytest.mark.parametrize(
    "name", ["threads_per_grid", "threads_per_thread_group", "result_shapes", "result_shape_out"]
)
def test_input_names_that_collide_with_the_call(name):
    with pytest.raises(ValueError, match=f"input name '{name}' collides with the kernel call"):
        make(inputs=(name,), src="out[id] = 0;")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("array", "reserved word in Metal or a name the generated kernel signature uses"),
        ("dextents", "reserved word in Metal or a name the generated kernel signature uses"),
        ("tensor_inline", "reserved word in Metal or a name the generated kernel signature uses"),
        ("int8_t", "is a Metal type name"),
        ("uint3", "is a Metal type name"),
        ("half4x4", "is a Metal type name"),
        ("packed_float3", "is a Metal type name"),
        ("__x", "reserved for the compiler"),
        ("_Tensor", "reserved for the compiler"),
        ("coreai_buf_x", "reserved for the names coreai_torch generates"),
        ("COREAI_X", "reserved for the names coreai_torch generates"),
    ],
)
def test_names_the_generated_code_uses_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        make(inputs=(name,), src="out[id] = 0;")
    with pytest.raises(ValueError, match=message):
        make(results=(name,), src="")
    with pytest.raises(ValueError, match=message):
        make(metal_params=[MetalParameter(name, "uint", "thread_position_in_grid")], src="")


# Names of macros: Metal's own (NAN, INFINITY, MAXFLOAT, M_PI_F), the C
# library's that the CPU backend's headers pull in (NULL, SIZE_MAX, alloca).
MACRO_NAMES = ["NAN", "INFINITY", "MAXFLOAT", "M_PI_F", "NULL", "SIZE_MAX", "alloca"]


@pytest.mark.parametrize("name", MACRO_NAMES)
def test_names_of_macros_work_as_parameter_names(name):
    def add_one(v: torch.Tensor) -> torch.Tensor:
        return v + 1

    k = TorchMetalKernel(
        f"val_macro_{name.lower()}",
        [name],
        ["out"],
        f"out[id] = {name}[id] + 1.0f;",
        add_one,
        metal_params=ID,
    )
    x = torch.arange(4.0)
    torch.testing.assert_close(k(x, result_shapes=[[4]], **CALL), x + 1)


@pytest.mark.parametrize("where", ["src", "helper_src"])
def test_a_trailing_backslash_does_not_swallow_generated_code(where):
    src = "out[id] = x[id] * 2.0f; // doubled \\"
    helper = "// helpers end here \\"
    kw = (
        {"src": src} if where == "src" else {"src": "out[id] = x[id] * 2.0f;", "helper_src": helper}
    )

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    kernel = make(name=f"val_backslash_{where}", defn=double, **kw)
    x = torch.arange(4.0)
    torch.testing.assert_close(kernel(x, result_shapes=[[4]], **CALL), x * 2)


def test_thread_execution_width_and_threads_per_simdgroup_exclude_each_other():
    with pytest.raises(ValueError, match=r"both \[\[thread_execution_width\]\] and "):
        make(
            metal_params=[
                *ID,
                MetalParameter("w", "uint", "thread_execution_width"),
                MetalParameter("s", "uint", "threads_per_simdgroup"),
            ]
        )


def test_inputs_of_rank_above_16_are_refused():
    with pytest.raises(ValueError, match="input 'x' has rank 17; Metal tensors have rank 16"):
        make(name="val_rank")(torch.ones([1] * 17), result_shapes=[[4]], **CALL)


def test_torch_defn_annotation_must_be_supported():
    def bad(x: torch.Tensor, y: str) -> torch.Tensor:
        return x

    with pytest.raises(TypeError, match="parameter 'y' is annotated <class 'str'>"):
        make(inputs=("x", "y"), defn=bad)


def test_torch_defn_unannotated_parameter():
    def bad(x) -> torch.Tensor:
        return x

    with pytest.raises(TypeError, match="parameter 'x' has no annotation"):
        make(defn=bad)


def test_torch_defn_no_varargs():
    def bad(*xs: torch.Tensor) -> torch.Tensor:
        return xs[0]

    with pytest.raises(TypeError, match=r"no \*args / \*\*kwargs"):
        make(defn=bad)

    def bad_kw(x: torch.Tensor, **kw: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(TypeError, match=r"no \*args / \*\*kwargs"):
        make(defn=bad_kw)


def test_torch_defn_parameter_count():
    with pytest.raises(ValueError, match="torch_defn has 2 parameters but input_names has 1"):
        make(defn=binary)


def test_string_annotations_are_resolved():
    # This module uses `from __future__ import annotations`: every annotation is a string.
    assert isinstance(binary.__annotations__["x"], str)
    k = make(name="val_strings", inputs=("x", "y"), defn=binary)
    assert k.scalar_types == {}


@pytest.mark.parametrize(
    "annotation", [int, "tuple[torch.Tensor, ...]", "list[int]", "dict[str, torch.Tensor]"]
)
def test_return_annotation_type_errors(annotation):
    def fn(x: torch.Tensor):
        return x

    fn.__annotations__["return"] = annotation
    with pytest.raises(TypeError, match="metal kernels only support"):
        make(defn=fn)


def test_single_tensor_return_with_two_results():
    with pytest.raises(ValueError, match="returns a single torch.Tensor but result_names has 2"):
        make(results=("a", "b"))


def test_tuple_length_must_match_results():
    def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x

    with pytest.raises(ValueError, match="tuple of 2 tensors but result_names has 3"):
        make(results=("a", "b", "c"), defn=two)


def test_list_length_checked_at_call_time():
    def three(x: torch.Tensor) -> list[torch.Tensor]:
        return [x, x, x]

    k = make(
        name="val_list_len", results=("a", "b"), defn=three, src="a[id] = x[id]; b[id] = x[id];"
    )
    k.execution_mode = "reference"
    with pytest.raises(ValueError, match="torch_defn returned 3 values but the kernel has 2"):
        k(torch.ones(4), result_shapes=[[4], [4]], **CALL)


def test_template_dtypes_keys_must_be_inputs():
    with pytest.raises(ValueError, match=r"template_dtypes keys \['z'\] are not input names"):
        make(template_dtypes={"z": "T"})


def test_template_placeholders_unique():
    with pytest.raises(ValueError, match=r"placeholders \['T'\] are used for more than one"):
        make(inputs=("x", "y"), defn=binary, template_dtypes={"x": "T", "y": "T"})


def test_more_than_31_parameters():
    names = [f"x{i}" for i in range(31)]
    params = ", ".join(f"{n}: torch.Tensor" for n in names)
    scope: dict = {"torch": torch}
    exec(f"def fn({params}) -> torch.Tensor:\n    return x0", scope)
    with pytest.raises(ValueError, match="metal kernels support 31 inputs, got 33"):
        make(name="val_wide", inputs=names, defn=scope["fn"])


def test_unknown_thread_attribute():
    with pytest.raises(
        ValueError, match="'thread_position', which is not a compute-kernel thread attr"
    ):
        make(metal_params=[MetalParameter("id", "uint", "thread_position")])


def test_metal_param_name_clash():
    with pytest.raises(ValueError, match="metal parameter name 'x' is already used"):
        make(metal_params=[MetalParameter("x", "uint", "thread_position_in_grid")])


# ------------------------------------------------------------------ calls


@pytest.fixture(scope="module")
def add():
    return make(name="val_add", inputs=("x", "y"), defn=binary, src="out[id] = x[id] + y[id];")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"threads_per_grid": (4, 1)}, "threads_per_grid must be a 3-tuple, got 2 elements"),
        ({"threads_per_thread_group": (4, 1, 1, 1)}, "threads_per_thread_group must be a 3-tuple"),
        (
            {"threads_per_thread_group": (0, 1, 1)},
            r"entries must be in \[1, 2\^32 - 1\] \(Metal counts threads in 32 bits\), got "
            r"\(0, 1, 1\)",
        ),
        ({"threads_per_thread_group": (64, 32, 1)}, "2048 threads; a threadgroup holds at most"),
        ({"threads_per_grid": (-1, 1, 1)}, r"threads_per_grid entries must be in \[0, 2\^32 - 1\]"),
        # Metal counts threads per grid dimension in 32 bits (issue 9, 2.9).
        (
            {"threads_per_grid": (2**32, 1, 1)},
            r"threads_per_grid entries must be in \[0, 2\^32 - 1\]",
        ),
        ({"result_shapes": [[4], [4]]}, "one shape per result name; expected 1"),
        ({"result_shapes": [[-4]]}, "negative dimension"),
        ({"result_shapes": [[1] * 17]}, "rank 17 .*; Metal tensors have rank 16 at most"),
    ],
)
def test_call_value_errors(add, kw, message):
    args = {**CALL, "result_shapes": [[4]], **kw}
    with pytest.raises(ValueError, match=message):
        add(torch.ones(4), torch.ones(4), **args)


Dims = collections.namedtuple("Dims", "x y z")  # a tuple subclass


@pytest.mark.parametrize(
    "launch",
    [
        # Tuples and lists are read in place; any other sequence through the
        # sequence protocol. All launch the same way.
        {"threads_per_grid": [4, 1, 1], "threads_per_thread_group": [4, 1, 1]},
        {"threads_per_grid": torch.Size([4, 1, 1]), "threads_per_thread_group": Dims(4, 1, 1)},
        {**CALL, "result_shapes": (torch.Size([4]),)},
        {**CALL, "result_shapes": [range(4, 5)]},
    ],
    ids=["lists", "size_and_named_tuple", "tuple_of_sizes", "range_shape"],
)
def test_launch_sizes_as_any_sequence(add, launch):
    x, y = torch.arange(4.0), torch.full((4,), 0.5)
    out = add(x, y, **{"result_shapes": [[4]], **launch})
    torch.testing.assert_close(out, torch.tensor([0.5, 1.5, 2.5, 3.5]), rtol=0, atol=0)


def test_a_sequence_of_the_wrong_length_is_shown_as_a_tuple(add):
    with pytest.raises(ValueError, match=r"must be a 3-tuple, got 2 elements: range\(0, 2\)"):
        add(
            torch.ones(4),
            torch.ones(4),
            **{**CALL, "threads_per_grid": range(2)},
            result_shapes=[[4]],
        )


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.float8_e4m3fn])
def test_unsupported_dtype_names_input(add, dtype):
    with pytest.raises(TypeError, match=f"input 'y' has dtype {dtype}"):
        add(torch.ones(4), torch.ones(4).to(dtype), result_shapes=[[4]], **CALL)


def test_tensor_where_scalar_declared_and_reverse():
    def fn(x: torch.Tensor, n: int) -> torch.Tensor:
        return x + n

    k = make(name="val_scalar_kind", inputs=("x", "n"), defn=fn, src="out[id] = x[id] + n;")
    with pytest.raises(TypeError, match="input 'n' is declared int in torch_defn, got a tensor"):
        k(torch.ones(4), torch.tensor(2), result_shapes=[[4]], **CALL)
    with pytest.raises(TypeError, match="input 'x' is declared torch.Tensor in torch_defn, got"):
        k(1.0, 2, result_shapes=[[4]], **CALL)
    with pytest.raises(TypeError, match="input 'n' is declared int in torch_defn, got float"):
        k(torch.ones(4), 2.5, result_shapes=[[4]], **CALL)


def test_scalar_ranges():
    def fn(x: torch.Tensor, n: int, s: float) -> torch.Tensor:
        return x * s + n

    k = make(name="val_ranges", inputs=("x", "n", "s"), defn=fn, src="out[id] = x[id] * s + n;")
    with pytest.raises(ValueError, match="int input 'n' = 2147483648 does not fit"):
        k(torch.ones(4), 2**31, 1.0, result_shapes=[[4]], **CALL)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="float input 's' = .* is not finite"):
            k(torch.ones(4), 1, bad, result_shapes=[[4]], **CALL)


def test_tensors_on_different_devices(add):
    with pytest.raises(ValueError, match="input 'x' is on cpu but 'y' is on meta"):
        add(torch.ones(4), torch.ones(4, device="meta"), result_shapes=[[4]], **CALL)


def test_wrong_number_of_inputs(add):
    with pytest.raises(TypeError, match=r"takes 2 inputs \['x', 'y'\], got 1"):
        add(torch.ones(4), result_shapes=[[4]], **CALL)


def test_result_shape_disagreeing_with_reference(add):
    add.execution_mode = "reference"
    try:
        with pytest.raises(ValueError, match=r"gives \[5\] for result 'out', but torch_defn "):
            add(torch.ones(4), torch.ones(4), result_shapes=[[5]], **CALL)
    finally:
        add.execution_mode = None


def test_returns_follow_annotation():
    def as_list(x: torch.Tensor) -> list[torch.Tensor]:
        return [x + 1, x + 2]

    def as_tuple(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x + 2

    src = "a[id] = x[id] + 1; b[id] = x[id] + 2;"
    for name, fn, kind in (("val_ret_list", as_list, list), ("val_ret_tuple", as_tuple, tuple)):
        k = make(name=name, results=("a", "b"), defn=fn, src=src)
        out = k(torch.zeros(4), result_shapes=[[4], [4]], **CALL)
        assert type(out) is kind
        torch.testing.assert_close(out[0], torch.ones(4))
        torch.testing.assert_close(out[1], torch.full((4,), 2.0))


def _prelude_macros() -> list[str]:
    clang = shutil.which("clang++-19") or shutil.which("clang++")
    if clang is None:
        pytest.skip("needs clang++ to list the CPU prelude's macros")
    msl = _C._msl_directory()
    run = subprocess.run(
        [clang, "-std=c++23", "-dM", "-E", "-x", "c++", "-I", msl, "-"],
        input="#include <coreai_msl.h>\n",
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.split()[1].split("(")[0] for line in run.stdout.splitlines()}
    return sorted(n for n in names if not n.startswith("_"))


def test_every_macro_the_cpu_backend_sees_is_refused_or_usable_as_a_name():
    # Each macro name of the CPU backend's prelude (Metal's, ours, the C and
    # C++ libraries') is either refused at construction with a clear message
    # or works as a tensor name: the renderings #undef the kernel's names.
    usable = []
    for name in _prelude_macros():
        try:
            definition.check_io_names("probe", [name], ["out"])
        except ValueError:
            continue
        usable.append(name)
    assert set(MACRO_NAMES) <= set(usable)
    x = torch.arange(4.0)
    batch = 24  # inputs per kernel, under Metal's 31 buffers
    for start in range(0, len(usable), batch):
        names = usable[start : start + batch]
        body = "out[id] = " + " + ".join(f"{n}[id]" for n in names) + ";"

        def total(*tensors: torch.Tensor) -> torch.Tensor:
            return sum(tensors)

        total.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY, annotation=torch.Tensor)
             for n in names],
            return_annotation=torch.Tensor,
        )  # fmt: skip
        kernel = TorchMetalKernel(
            f"val_macros_{start}", names, ["out"], body, total, metal_params=ID
        )
        out = kernel(*[x] * len(names), result_shapes=[[4]], **CALL)
        torch.testing.assert_close(out, x * len(names), msg=f"names {names}")


# C++20's keywords (the CPU and CUDA backends compile C++23) and the
# preprocessor's `defined` (the rendering's `#undef <name>` of every parameter
# would be an error): refused at construction, not when the kernel compiles.
@pytest.mark.parametrize(
    "name",
    [
        "defined",
        "requires",
        "concept",
        "co_await",
        "co_yield",
        "co_return",
        "consteval",
        "constinit",
        "char8_t",
    ],
)
def test_names_that_fail_in_generated_code_are_refused_at_construction(name):
    with pytest.raises(ValueError, match=f"input name '{name}' is a reserved word"):
        make(inputs=(name,), src="out[id] = 0;")


def test_a_placeholder_inside_a_longer_identifier_is_replaced_with_a_warning():
    # Apple documents a plain replacement and its package does it (with T,
    # INFINITY becomes INFINIfloatY); the warning names the identifier.
    with pytest.warns(
        UserWarning,
        match=r"placeholder 'T' of input 'x' is part of the longer identifiers 'INFINITY' "
        r"\(line 2\) in src, where it is replaced too",
    ):
        k = make(
            name="val_tmpl_inner",
            src="// T in a comment is no identifier\nout[id] = x[id] < T(0) ? -INFINITY : x[id];",
            template_dtypes={"x": "T"},
        )
    spec = Specialization(
        (TensorArg("x", 1, torch.float32),), (TensorArg("out", 1, torch.float32),)
    )
    _, source = render_coreai_source(k.definition, spec)
    assert "x[id] < float(0) ? -INFINIfloatY : x[id];" in source


def test_placeholders_are_replaced_in_input_order_as_apples_package_does():
    # Apple's package replaces in input order whatever the dict's order, so T
    # (of x) is replaced inside T_Y first. Its output for this source, with x
    # float16 and y float32: "half_Y yv = y[id]; half xv = x[id]; ...".
    with pytest.warns(
        UserWarning, match=r"'T' of input 'x' is part of the longer identifiers 'T_Y'"
    ):
        k = make(
            name="val_tmpl_order",
            inputs=("x", "y"),
            defn=binary,
            src="T_Y yv = y[id]; T xv = x[id]; out[id] = xv + yv;",
            template_dtypes={"y": "T_Y", "x": "T"},
        )
    spec = Specialization(
        (TensorArg("x", 1, torch.float16), TensorArg("y", 1, torch.float32)),
        (TensorArg("out", 1, torch.float32),),
    )
    _, source = render_coreai_source(k.definition, spec)
    assert "half_Y yv = y[id]; half xv = x[id]; out[id] = xv + yv;" in source


def test_whole_placeholders_give_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(
            name="val_tmpl_whole", src="out[id] = T(2) * x[id]; // TODO", template_dtypes={"x": "T"}
        )
