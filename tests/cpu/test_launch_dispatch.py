"""The launch op: Metal dispatchThreads semantics, argument binding, validation."""

from __future__ import annotations

import itertools

import pytest
import torch
from support.cpu_launch import METAL_TYPE, Scalar, Tensor, kernel, registration

F32 = torch.float32
I32 = torch.int32

# Every compute attribute, some in their narrower or shorter forms, except
# thread_execution_width: Metal refuses it next to threads_per_simdgroup
# (test_thread_execution_width checks it alone).
ATTRIBUTES = [
    ("gid", "uint3", "thread_position_in_grid", 3),
    ("lid", "ushort3", "thread_position_in_threadgroup", 3),
    ("tg", "uint3", "threadgroup_position_in_grid", 3),
    ("tpg", "uint3", "threads_per_grid", 3),
    ("tptg", "uint3", "threads_per_threadgroup", 3),
    ("tgpg", "ushort3", "threadgroups_per_grid", 3),
    ("dtpt", "uint3", "dispatch_threads_per_threadgroup", 3),
    ("origin", "uint3", "grid_origin", 3),
    ("gsize", "uint3", "grid_size", 3),
    ("gid2", "uint2", "thread_position_in_grid", 2),
    ("gidx", "uint", "thread_position_in_grid", 1),
    ("tiit", "uint", "thread_index_in_threadgroup", 1),
    ("tiis", "ushort", "thread_index_in_simdgroup", 1),
    ("sgit", "uint", "simdgroup_index_in_threadgroup", 1),
    ("tps", "uint", "threads_per_simdgroup", 1),
    ("sgpt", "uint", "simdgroups_per_threadgroup", 1),
    ("qgit", "uint", "quadgroup_index_in_threadgroup", 1),
    ("tiiq", "uint", "thread_index_in_quadgroup", 1),
    ("qgpt", "uint", "quadgroups_per_threadgroup", 1),
    ("dsgpt", "uint", "dispatch_simdgroups_per_threadgroup", 1),
    ("dqgpt", "uint", "dispatch_quadgroups_per_threadgroup", 1),
]
COLUMNS = sum(a[3] for a in ATTRIBUTES)


def _attribute_kernel():
    lines = ["const uint t = gid.x + gid.y * tpg.x + gid.z * tpg.x * tpg.y;", "uint c = 0;"]
    for name, _, _, width in ATTRIBUTES:
        if width == 1:
            lines.append(f"out[c++, t] = uint({name});")
        else:
            lines += [f"out[c++, t] = uint({name}[{i}]);" for i in range(width)]
    return kernel(
        "attributes",
        [],
        [Tensor("out", torch.int32, 2)],
        "\n".join(lines),
        [(n, ty, attr) for n, ty, attr, _ in ATTRIBUTES],
    )


def _expected_attributes(grid, group):
    groups = [-(-g // s) for g, s in zip(grid, group)]
    rows = {}
    for gz, gy, gx in itertools.product(*(range(n) for n in reversed(groups))):
        tg = (gx, gy, gz)
        size = [min(group[d], grid[d] - tg[d] * group[d]) for d in range(3)]
        count = size[0] * size[1] * size[2]
        dispatch_count = group[0] * group[1] * group[2]
        threads = itertools.product(range(size[2]), range(size[1]), range(size[0]))
        for index, (lz, ly, lx) in enumerate(threads):
            gid = [tg[d] * group[d] + (lx, ly, lz)[d] for d in range(3)]
            values = {
                "gid": gid,
                "lid": [lx, ly, lz],
                "tg": list(tg),
                "tpg": list(grid),
                "tptg": size,
                "tgpg": groups,
                "dtpt": list(group),
                "origin": [0, 0, 0],
                "gsize": list(grid),
                "gid2": gid[:2],
                "gidx": [gid[0]],
                "tiit": [index],
                "tiis": [index % 32],
                "sgit": [index // 32],
                "tps": [32],
                "sgpt": [-(-count // 32)],
                "qgit": [index // 4],
                "tiiq": [index % 4],
                "qgpt": [-(-count // 4)],
                "dsgpt": [-(-dispatch_count // 32)],
                "dqgpt": [-(-dispatch_count // 4)],
            }
            t = gid[0] + gid[1] * grid[0] + gid[2] * grid[0] * grid[1]
            rows[t] = [v for name, *_ in ATTRIBUTES for v in values[name]]
    return torch.tensor([rows[t] for t in range(len(rows))], dtype=torch.int32)


ATTRIBUTE_KERNEL = _attribute_kernel()


@pytest.mark.parametrize(
    ("grid", "group"),
    [
        ((20, 6, 3), (8, 4, 2)),  # edge groups along every dimension, 2 SIMD-groups in full ones
        ((5, 6, 7), (2, 4, 3)),
        ((70, 1, 1), (64, 1, 1)),
        ((1, 1, 1), (32, 32, 1)),  # a group larger than the grid
    ],
)
def test_every_thread_attribute(grid, group) -> None:
    total = grid[0] * grid[1] * grid[2]
    (out,) = ATTRIBUTE_KERNEL(grid=grid, group=group, shapes=[[total, COLUMNS]])
    expected = _expected_attributes(grid, group)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


HITS = kernel(
    "hits",
    [Tensor("hits", I32, 3)],
    [Tensor("out")],
    "hits[gid.x, gid.y, gid.z] += 1;",
    [("gid", "uint3", "thread_position_in_grid")],
)


@pytest.mark.parametrize(("grid", "group"), [((10, 3, 2), (4, 2, 2)), ((7, 7, 1), (8, 8, 1))])
def test_each_thread_of_the_grid_runs_once_and_none_outside(grid, group) -> None:
    # The tensor is larger than the grid; threads outside the grid must not run.
    hits = torch.zeros(4, 9, 12, dtype=I32)  # torch [z, y, x]
    HITS(hits, grid=grid, group=group, shapes=[[1]])
    expected = torch.zeros_like(hits)
    expected[: grid[2], : grid[1], : grid[0]] = 1
    torch.testing.assert_close(hits, expected, rtol=0, atol=0)


def test_a_grid_just_under_2_32_threads_runs_its_last_threads() -> None:
    # 2^32 - 1 threads along x in groups of 1024: the group count is rounded
    # up in 64 bits (in 32 bits it wrapped to 0 and no thread ran). Only the
    # last 8 threads write, so the launch is a fast loop of comparisons.
    last = 2**32 - 1
    k = kernel(
        "grid_edge",
        [],
        [Tensor("out", torch.uint32)],
        f"if (id >= {last - 8}u) out[id - {last - 8}u] = id;",
        [("id", "uint", "thread_position_in_grid")],
    )
    (out,) = k(grid=(last, 1, 1), group=(1024, 1, 1), shapes=[[8]])
    assert out.tolist() == list(range(last - 8, last))


def test_empty_grid_runs_nothing() -> None:
    hits = torch.zeros(4, 9, 12, dtype=I32)
    (out,) = HITS(hits, grid=(0, 5, 5), group=(4, 4, 1), shapes=[[3]])
    assert out.shape == (3,)
    assert hits.sum() == 0


def test_scalars_zero_d_tensors_and_strided_inputs() -> None:
    k = kernel(
        "binding",
        [
            Tensor("x", rank=2),
            Scalar("n", "int"),
            Scalar("scale", "float"),
            Scalar("negate", "bool"),
            Tensor("bias", rank=0),
        ],
        [Tensor("out", rank=2), Tensor("total", I32)],
        """
        const float v = x[gid.x, gid.y] * scale + bias;
        out[gid.x, gid.y] = negate ? -v : v;
        if (gid.x == 0 && gid.y == 0) total[0] = n + int(x.get_extent(0)) * 1000;
        """,
        [("gid", "uint2", "thread_position_in_grid")],
    )
    base = torch.arange(12, dtype=F32).reshape(3, 4)
    x = base.t()  # torch [4, 3], strides (1, 4): not contiguous
    bias = torch.tensor(0.5)
    out, total = k(x, -7, 2.0, True, bias, grid=(3, 4, 1), group=(2, 2, 1), shapes=[[4, 3], [1]])
    torch.testing.assert_close(out, -(x * 2.0 + 0.5), rtol=0, atol=0)
    assert total.item() == -7 + 3 * 1000
    out, _ = k(x, 0, 1, False, bias, grid=(3, 4, 1), group=(2, 2, 1), shapes=[[4, 3], [1]])
    torch.testing.assert_close(out, x + 0.5, rtol=0, atol=0)


DTYPES = list(METAL_TYPE)


def test_every_dtype_round_trips() -> None:
    names = [f"x{i}" for i in range(len(DTYPES))]
    k = kernel(
        "copy_dtypes",
        [Tensor(n, d) for n, d in zip(names, DTYPES)],
        [Tensor(f"y{i}", d) for i, d in enumerate(DTYPES)],
        "\n".join(f"y{i}[id] = x{i}[id];" for i in range(len(DTYPES))),
        [("id", "uint", "thread_position_in_grid")],
    )
    g = torch.Generator().manual_seed(3)
    inputs = []
    for d in DTYPES:
        if d == torch.bool:
            inputs.append(torch.rand(40, generator=g) > 0.5)
        elif d.is_floating_point:
            inputs.append(torch.randn(40, generator=g).to(d))
        else:
            info = torch.iinfo(d)
            lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
            inputs.append(torch.randint(lo, hi, (40,), generator=g, dtype=torch.int64).to(d))
    outs = k(*inputs, grid=(40, 1, 1), group=(16, 1, 1), shapes=[[40]] * len(DTYPES))
    for x, y in zip(inputs, outs):
        assert y.dtype == x.dtype
        assert torch.equal(y, x)


def test_results_are_contiguous_with_the_requested_shapes() -> None:
    k = kernel(
        "rank3_result",
        [],
        [Tensor("out", F32, 3)],
        "",
        [("gid", "uint3", "thread_position_in_grid")],
    )
    (out,) = k(grid=(1, 1, 1), group=(1, 1, 1), shapes=[[2, 3, 5]])
    assert out.shape == (2, 3, 5) and out.is_contiguous() and out.dtype == F32


def test_thread_execution_width() -> None:
    k = kernel(
        "execution_width",
        [],
        [Tensor("out", I32)],
        "out[id] = int(width);",
        [("id", "uint", "thread_position_in_grid"), ("width", "uint", "thread_execution_width")],
    )
    (out,) = k(grid=(3, 1, 1), group=(3, 1, 1), shapes=[[3]])
    assert out.tolist() == [32, 32, 32]  # the SIMD-group width


# ---- validation -------------------------------------------------------------------


def test_identical_registrations_share_a_handle_and_count_their_uses() -> None:
    args = HITS.registration
    handle = torch.ops.coreai_torch.register_kernel(*args)
    assert handle == HITS.handle
    torch.ops.coreai_torch.release_kernel(handle)  # the use just added
    debug = torch.ops.coreai_torch.register_kernel(*args[:-1], 1)
    assert debug != HITS.handle  # the debug option makes another specialization
    torch.ops.coreai_torch.release_kernel(debug)
    # HITS's own registration is still there.
    assert torch.ops.coreai_torch.cpu_translation_unit(HITS.handle)


def test_a_released_handle_is_unknown() -> None:
    args = registration("released", [Tensor("x")], [Tensor("out")], "out[id] = x[id];", ID)
    handle = torch.ops.coreai_torch.register_kernel(*args)
    torch.ops.coreai_torch.release_kernel(handle)
    with pytest.raises(ValueError, match=f"unknown kernel handle {handle}"):
        torch.ops.coreai_torch.launch(handle, [torch.ones(4)], [], [4, 1, 1], [4, 1, 1], [4])
    with pytest.raises(ValueError, match="no such registered kernel"):
        torch.ops.coreai_torch.release_kernel(handle)


def _register(**changes):
    args = list(registration("k", [Tensor("x")], [Tensor("out")], "out[id] = x[id];", ID))
    fields = {"arg_kinds": 4, "input_dtypes": 5, "input_ranks": 6, "result_dtypes": 8}
    fields |= {"result_ranks": 9, "thread_attrs": 10, "options": 11}
    for key, value in changes.items():
        args[fields[key]] = value
    return torch.ops.coreai_torch.register_kernel(*args)


@pytest.mark.parametrize(
    ("changes", "error", "pattern"),
    [
        (
            {"thread_attrs": ["thread_position_in_grid", "thread_id"]},
            ValueError,
            r"kernel 'k'.*entry 1.*unknown thread attribute 'thread_id'",
        ),
        (
            {"thread_attrs": ["thread_execution_width", "threads_per_simdgroup"]},
            ValueError,
            r"both \[\[thread_execution_width\]\] and \[\[threads_per_simdgroup\]\]",
        ),
        ({"arg_kinds": "x"}, ValueError, "arg_kinds must be made of"),
        (
            {"input_dtypes": [torch.float64]},
            TypeError,
            "input 'x' has dtype torch.float64, which Metal",
        ),
        (
            {"result_dtypes": [torch.complex64]},
            TypeError,
            "result 'out' has dtype torch.complex64, which",
        ),
        (
            {"input_ranks": [17]},
            ValueError,
            "input 'x' has rank 17; Metal tensors have rank 0 to 16",
        ),
        ({"result_ranks": [-1]}, ValueError, "result 'out' has rank -1"),
        ({"options": 8}, ValueError, "unknown option bits in 8"),
    ],
)
def test_registration_validation(changes, error, pattern) -> None:
    with pytest.raises(error, match=pattern):
        _register(**changes)


def _launch(tensors, scalars=(), grid=(4, 1, 1), group=(4, 1, 1), shapes=((4,),)):
    return torch.ops.coreai_torch.launch(
        BINDING_CHECK.handle,
        list(tensors),
        list(scalars),
        list(grid),
        list(group),
        [d for s in shapes for d in s],
    )


ID = [("id", "uint", "thread_position_in_grid")]
BINDING_CHECK = kernel(
    "checked",
    [Tensor("x"), Scalar("n", "int")],
    [Tensor("out")],
    "out[id] = x[id] + float(n);",
    ID,
)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: _launch([], [1]), ValueError, "kernel 'checked': expected 1 tensor inputs, got 0"),
        (lambda: _launch([torch.ones(4)], []), ValueError, "expected 1 scalar inputs, got 0"),
        (
            lambda: _launch([torch.ones(4)], [1.5]),
            TypeError,
            "input 'n' is an int parameter, got a Double scalar",
        ),
        (
            lambda: _launch([torch.ones(4)], [True]),
            TypeError,
            "input 'n' is an int parameter, got a Bool scalar",
        ),
        (
            lambda: _launch([torch.ones(4)], [2**31]),
            ValueError,
            "int input 'n' = 2147483648 does not fit Metal's 32-bit int",
        ),
        (
            lambda: _launch([torch.ones(4)], [1], grid=(4, 1)),
            ValueError,
            "threads_per_grid must have 3 entries",
        ),
        (
            lambda: _launch([torch.ones(4)], [1], grid=(2**32, 1, 1)),
            ValueError,
            r"threads_per_grid entries must be in \[0, 2\^32 - 1\]",
        ),
        (
            lambda: _launch([torch.ones(4)], [1], group=(4, 0, 1)),
            ValueError,
            "threads_per_thread_group entries",
        ),
        (
            lambda: _launch([torch.ones(4)], [1], group=(64, 32, 1)),
            ValueError,
            "2048 threads; a Metal threadgroup holds at most 1024",
        ),
        (
            lambda: _launch([torch.ones(4, dtype=torch.float64)], [1]),
            TypeError,
            "input 'x' has dtype float64, but this specialization was registered for float32",
        ),
        (
            lambda: _launch([torch.ones(2, 2)], [1]),
            ValueError,
            r"input 'x' has rank 2 \(shape \[2, 2\]\), but this specialization was registered "
            "for rank 1",
        ),
        (
            lambda: _launch([torch.ones(4)], [1], shapes=((4,), (2,))),
            ValueError,
            "result_shapes has 2 entries, but the results' ranks add up to 1",
        ),
        (lambda: _launch([torch.ones(4)], [1], shapes=((-1,),)), ValueError, "negative size"),
        (
            lambda: torch.ops.coreai_torch.launch(12345, [], [], [1, 1, 1], [1, 1, 1], []),
            ValueError,
            "unknown kernel handle 12345",
        ),
    ],
)
def test_launch_validation(call, error, pattern) -> None:
    with pytest.raises(error, match=pattern):
        call()


def test_tensors_on_two_devices_are_refused() -> None:
    k = kernel(
        "two_inputs",
        [Tensor("a"), Tensor("b")],
        [Tensor("out")],
        "out[id] = a[id] + b[id];",
        ID,
    )
    with pytest.raises(ValueError, match="one device; input 'b' is on meta but 'a' is on cpu"):
        k(
            torch.ones(4),
            torch.ones(4, device="meta"),
            grid=(4, 1, 1),
            group=(4, 1, 1),
            shapes=[[4]],
        )


def test_meta_launch_only_allocates() -> None:
    before = torch.ops.coreai_torch.cpu_compile_count()
    (out,) = BINDING_CHECK(
        torch.ones(4, device="meta"), 3, grid=(4, 1, 1), group=(4, 1, 1), shapes=[[12]]
    )
    assert out.device.type == "meta" and out.shape == (12,) and out.dtype == F32
    assert torch.ops.coreai_torch.cpu_compile_count() == before
