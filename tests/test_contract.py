"""The contract module's two renderings, pinned for the seed kernels."""

import pytest
import torch

from coreai_torch.contract import (
    METAL_TYPES,
    STRIDED_VIEW_DTYPES,
    KernelDefinition,
    ScalarArg,
    Specialization,
    TensorArg,
    meta_length,
    meta_offsets,
    render_buffer_source,
    render_coreai_source,
    strided_view_header,
)
from coreai_torch.examples import custom_add, custom_matmul, scale_shift

F32 = torch.float32
ADD_SPEC = Specialization(
    (TensorArg("x", 1, F32), TensorArg("y", 1, F32)), (TensorArg("output", 1, F32),)
)


def test_coreai_rendering_of_vector_add_is_pinned():
    entry, source = render_coreai_source(custom_add.definition, ADD_SPEC)
    assert entry == "vector_add_c6de7176fb"
    assert source == (
        "\n#include <metal_stdlib>\n"
        "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
        "using namespace metal;\n"
        "using namespace mpp::tensor_ops;\n"
        "\n\n"
        "#undef x\n#undef y\n#undef output\n#undef id\n"
        "[[kernel]] void vector_add_c6de7176fb("
        "tensor<device float, metal::dextents<int, 1>, tensor_handle> x [[buffer(0)]], "
        "tensor<device float, metal::dextents<int, 1>, tensor_handle> y [[buffer(1)]], "
        "tensor<device float, metal::dextents<int, 1>, tensor_handle> output [[buffer(2)]], "
        "uint id [[thread_position_in_grid]]) { output[id] = x[id] + y[id];\n\n\n}"
    )


def test_buffer_rendering_of_vector_add_is_pinned():
    entry, source = render_buffer_source(custom_add.definition, ADD_SPEC)
    assert entry == "vector_add_447238add9"
    view = "metal::tensor<device float, metal::dextents<int, 1>, metal::tensor_inline>"
    assert source == (
        "#include <metal_stdlib>\n"
        "#include <metal_tensor>\n"
        "using namespace metal;\n"
        '#line 1 "helper_src"\n'
        "\n\n"
        "#undef x\n#undef y\n#undef output\n#undef id\n"
        '#line 1 "generated_signature"\n'
        f"[[kernel]] void {entry}("
        "device float* coreai_buf_x [[buffer(0)]], device float* coreai_buf_y [[buffer(1)]], "
        "device float* coreai_buf_output [[buffer(2)]], constant int* coreai_meta [[buffer(3)]], "
        "uint id [[thread_position_in_grid]]) {\n"
        f"{view} x(coreai_buf_x, metal::dextents<int, 1>(coreai_meta[0]), "
        "metal::array<int, 1>{coreai_meta[1]});\n"
        f"{view} y(coreai_buf_y, metal::dextents<int, 1>(coreai_meta[2]), "
        "metal::array<int, 1>{coreai_meta[3]});\n"
        f"{view} output(coreai_buf_output, metal::dextents<int, 1>(coreai_meta[4]), "
        "metal::array<int, 1>{coreai_meta[5]});\n"
        '#line 1 "src"\n'
        "output[id] = x[id] + y[id];\n\n"
        "}\n"
    )


def _definition(src: str, helper: str = "", inputs=("x",), results=("out",)) -> KernelDefinition:
    return KernelDefinition(
        "k",
        tuple(inputs),
        tuple(results),
        src,
        helper,
        (("id", "uint", "thread_position_in_grid"),),
        (),
    )


def test_metal_performance_primitives_are_included_only_when_used():
    spec = Specialization((TensorArg("x", 1, F32),), (TensorArg("out", 1, F32),))
    plain = render_buffer_source(_definition("out[id] = x[id];"), spec)[1]
    assert "MetalPerformancePrimitives" not in plain and "mpp" not in plain
    for src, helper in (
        ("constexpr auto d = matmul2d_descriptor(8, 8, 8);", ""),
        ("out[id] = x[id];", "using mm = mpp::tensor_ops::matmul2d<d, execution_simdgroups<4>>;"),
    ):
        source = render_buffer_source(_definition(src, helper), spec)[1]
        assert "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n" in source
        assert "using namespace mpp::tensor_ops;\n" in source
    # The Core AI rendering keeps Apple's preamble.
    coreai = render_coreai_source(_definition("out[id] = x[id];"), spec)[1]
    assert "using namespace mpp::tensor_ops;" in coreai


@pytest.mark.parametrize("dtype", sorted(STRIDED_VIEW_DTYPES, key=str))
def test_dtypes_metal_tensors_lack_use_the_strided_view(dtype):
    spec = Specialization(
        (TensorArg("x", 2, dtype), TensorArg("y", 1, F32)), (TensorArg("out", 1, dtype),)
    )
    _, source = render_buffer_source(_definition("out[id] = x[0, id];", inputs=("x", "y")), spec)
    mtype = METAL_TYPES[dtype]
    assert strided_view_header() in source
    assert f"coreai::strided_view<{mtype}, 2> x(coreai_buf_x, coreai_meta + 0);" in source
    assert "metal::tensor<device float, metal::dextents<int, 1>, metal::tensor_inline> y(" in source
    assert f"coreai::strided_view<{mtype}, 1> out(coreai_buf_out, coreai_meta + 6);" in source


def test_rank_zero_results_and_inputs():
    spec = Specialization((TensorArg("s", 0, F32),), (TensorArg("total", 0, F32),))
    definition = _definition("total.set(s * 2.0f);", inputs=("s",), results=("total",))
    _, buffer = render_buffer_source(definition, spec)
    assert "constant float& s [[buffer(0)]]" in buffer  # a 0-d input is a value eagerly
    assert "coreai::strided_view<float, 0> total(coreai_buf_total);" in buffer
    _, coreai = render_coreai_source(definition, spec)
    # The Core AI runtime binds tensors only: a 0-d input arrives as one element.
    assert (
        "tensor<device float, metal::dextents<int, 1>, tensor_handle> coreai_buf_s [[buffer(0)]]"
        in coreai
    )
    assert "const float s = coreai_buf_s[0];" in coreai
    assert "constant float& s" not in coreai
    assert (
        "tensor<device float, metal::dextents<int, 0>, tensor_handle> total [[buffer(1)]]" in coreai
    )


def test_a_trailing_backslash_swallows_no_generated_line():
    spec = Specialization((TensorArg("x", 1, F32),), (TensorArg("out", 1, F32),))
    definition = _definition("out[id] = x[id]; // copy \\", helper="// helpers \\")
    for render in (render_buffer_source, render_coreai_source):
        _, source = render(definition, spec)
        lines = source.splitlines()
        for i, line in enumerate(lines):
            if line.endswith("\\"):
                assert lines[i + 1] == "", (render.__name__, lines[i : i + 2])


def test_template_dtypes_follow_the_named_input():
    for dtype, mtype in ((torch.float16, "half"), (torch.bfloat16, "bfloat"), (F32, "float")):
        spec = Specialization(
            (TensorArg("A", 2, dtype), TensorArg("B", 2, dtype)), (TensorArg("C", 2, dtype),)
        )
        _, coreai = render_coreai_source(custom_matmul.definition, spec)
        _, buffer = render_buffer_source(custom_matmul.definition, spec)
        assert f"{mtype} sum = 0.0f;" in coreai
        assert f"{mtype} sum = 0.0f;" in buffer
        assert "TYPE" not in coreai and "TYPE" not in buffer
        assert f"tensor<device {mtype}, metal::dextents<int, 2>, tensor_handle> A" in coreai
        # rank-2 metadata: extents then strides, A at 0, B at 4, C at 8.
        assert "dextents<int, 2>(coreai_meta[8], coreai_meta[9]), " in buffer
        assert "metal::array<int, 2>{coreai_meta[10], coreai_meta[11]}" in buffer


SCALE_SPEC = Specialization(
    (
        TensorArg("x", 1, F32),
        ScalarArg("n", int),
        ScalarArg("scale", float),
        ScalarArg("negate", bool),
    ),
    (TensorArg("out", 1, F32),),
)


def test_scalars_are_constant_references_and_baked_in_coreai():
    values = {"n": 3, "scale": 0.5, "negate": True}
    entry, source = render_coreai_source(scale_shift.definition, SCALE_SPEC, values)
    assert "constant int& n [[buffer(1)]], constant float& scale [[buffer(2)]], " in source
    assert "constant bool& negate [[buffer(3)]]" in source
    assert "{ {\nint n = 3;\nfloat scale = 0.5f;\nbool negate = true;\n" in source
    # The same values share a source; other values get their own entry.
    assert render_coreai_source(scale_shift.definition, SCALE_SPEC, dict(values))[0] == entry
    other = render_coreai_source(scale_shift.definition, SCALE_SPEC, {**values, "n": 4})[0]
    assert other != entry


def test_buffer_rendering_keeps_scalars_as_parameters():
    _, source = render_buffer_source(scale_shift.definition, SCALE_SPEC)
    assert "constant int& n [[buffer(1)]]" in source
    assert "constant int* coreai_meta [[buffer(5)]]" in source
    assert "int n = " not in source


@pytest.mark.parametrize(
    ("value", "typ", "message"),
    [
        (2**31, int, "does not fit"),
        (float("nan"), float, "not finite"),
        (1e39, float, "not finite as Metal's 32-bit float"),
    ],
)
def test_unbakeable_scalars(value, typ, message):
    values = {"n": 1, "scale": 1.0, "negate": False}
    values["n" if typ is int else "scale"] = value
    with pytest.raises(ValueError, match=message):
        render_coreai_source(scale_shift.definition, SCALE_SPEC, values)


def test_metadata_layout_skips_zero_rank_tensors():
    spec = Specialization(
        (TensorArg("a", 3, F32), TensorArg("s", 0, F32), TensorArg("b", 2, F32)),
        (TensorArg("c", 1, F32),),
    )
    assert meta_offsets(spec) == {"a": 0, "b": 6, "c": 10}
    assert meta_length(spec) == 12


def test_unsupported_dtype_is_a_type_error():
    spec = Specialization(
        (TensorArg("x", 1, torch.float64), TensorArg("y", 1, F32)), (TensorArg("output", 1, F32),)
    )
    with pytest.raises(TypeError, match="kernel 'vector_add': input 'x' has dtype torch.float64"):
        render_buffer_source(custom_add.definition, spec)


def test_names_are_deterministic_and_depend_on_the_source():
    a = render_buffer_source(custom_add.definition, ADD_SPEC)
    b = render_buffer_source(custom_add.definition, ADD_SPEC)
    assert a == b
    half = Specialization(
        (TensorArg("x", 1, torch.float16), TensorArg("y", 1, torch.float16)),
        (TensorArg("output", 1, torch.float16),),
    )
    assert render_buffer_source(custom_add.definition, half)[0] != a[0]
