"""Property test: random constructor and call arguments never crash the API.

Every failure must be one of the documented exception types, and a message
about a kernel must name it.
"""

import string

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coreai_torch
from coreai_torch import MetalCompileError, MetalParameter, TorchMetalKernel

DOCUMENTED = (ValueError, TypeError, MetalCompileError)

identifiers = st.text(string.ascii_letters + "_", min_size=1, max_size=6).filter(
    lambda s: not s.startswith("coreai_")
)
names = st.one_of(identifiers, st.text(max_size=6), st.none(), st.integers())
name_lists = st.one_of(st.lists(identifiers, max_size=4), st.text(max_size=4), st.none())
attrs = st.sampled_from(
    ["thread_position_in_grid", "thread_index_in_threadgroup", "grid_size", "bogus", ""]
)
metal_types = st.sampled_from(["uint", "uint2", "uint3", "ushort", "float", "int"])
metal_params = st.one_of(
    st.none(),
    st.lists(st.builds(MetalParameter, identifiers, metal_types, attrs), max_size=3),
    st.text(max_size=3),
)


def _defn(kind: str, arity: int):
    ann = {"tensor": "torch.Tensor", "int": "int", "float": "float", "str": "str"}[kind]
    params = ", ".join(f"a{i}: {ann}" for i in range(arity))
    scope: dict = {"torch": torch}
    exec(f"def fn({params}) -> torch.Tensor:\n    return torch.zeros(4)", scope)
    return scope["fn"]


torch_defns = st.builds(
    _defn, st.sampled_from(["tensor", "int", "float", "str"]), st.integers(0, 3)
)
dtypes = st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64])
dims = st.integers(-2, 2000)
triples = st.lists(dims, min_size=0, max_size=4).map(tuple)
shapes = st.lists(st.lists(st.integers(-1, 5), max_size=3), max_size=3)
call_args = st.lists(
    st.one_of(
        st.integers(-(2**40), 2**40),
        st.floats(),
        st.booleans(),
        st.builds(lambda d: torch.zeros(4, dtype=d), dtypes),
    ),
    max_size=4,
)


def _names_kernel(exc: Exception, name: object) -> bool:
    if isinstance(name, str) and name.isidentifier():
        return f"'{name}'" in str(exc) or str(name) in str(exc)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    names,
    name_lists,
    name_lists,
    st.text(max_size=20),
    torch_defns,
    metal_params,
    st.one_of(st.none(), st.dictionaries(identifiers, identifiers, max_size=2)),
)
def test_constructor_raises_only_documented_errors(name, ins, outs, src, defn, params, tmpl):
    if isinstance(name, str) and name.isidentifier():
        name = "fuzz_" + name
    try:
        TorchMetalKernel(name, ins, outs, src, defn, metal_params=params, template_dtypes=tmpl)
    except DOCUMENTED as exc:
        assert _names_kernel(exc, name), str(exc)


def _fuzz_target() -> TorchMetalKernel:
    def ref(x: torch.Tensor, n: int) -> torch.Tensor:
        return x + n

    kernel = TorchMetalKernel(
        "fuzz_call",
        ["x", "n"],
        ["out"],
        "out[id] = x[id] + n;",
        ref,
        metal_params=[MetalParameter("id", "uint", "thread_position_in_grid")],
    )
    kernel.execution_mode = "reference"  # the call checks, not the compiler, are under test
    return kernel


TARGET = _fuzz_target()


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(call_args, triples, triples, shapes)
def test_call_raises_only_documented_errors(args, grid, group, result_shapes):
    assert coreai_torch.get_execution_mode() in ("kernel", "reference")
    try:
        TARGET(
            *args,
            threads_per_grid=grid,
            threads_per_thread_group=group,
            result_shapes=result_shapes,
        )
    except DOCUMENTED as exc:
        assert "fuzz_call" in str(exc), str(exc)
