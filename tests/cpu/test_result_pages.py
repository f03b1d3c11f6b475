"""Large results are mapped as the groups run (csrc/cpu/launcher.cpp, ResultPages).

A kernel's first store to each page of a fresh result would otherwise trap,
one page fault per 4 KiB; mapping them a slice at a time just before the
groups that write them is what brings a 2^24-element add level with torch.add
(benchmarks/README.md). mincore(2) says which pages of a result are mapped
after a launch that stored into a few of them.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest
import torch
from support.cpu_launch import Tensor, kernel

GID = [("id", "uint", "thread_position_in_grid")]
MADV_POPULATE_WRITE = 23  # Linux 5.14

if sys.platform != "linux":
    pytest.skip("mapping results ahead is Linux's MADV_POPULATE_WRITE", allow_module_level=True)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _populate_supported() -> bool:
    area = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    supported = _libc.madvise(address, mmap.PAGESIZE, MADV_POPULATE_WRITE) == 0
    area.close()
    return supported


def _mapped_pages(t: torch.Tensor) -> tuple[int, int]:
    """(mapped, total) whole pages of ``t``'s memory."""
    page = mmap.PAGESIZE
    begin = -(-t.data_ptr() // page) * page
    end = (t.data_ptr() + t.nbytes) // page * page
    count = (end - begin) // page
    vec = (ctypes.c_ubyte * count)()
    assert _libc.mincore(begin, end - begin, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec), count


@pytest.mark.skipif(not _populate_supported(), reason="the Linux kernel lacks MADV_POPULATE_WRITE")
def test_every_page_of_a_large_result_is_mapped() -> None:
    one_store = kernel(
        "map_ahead_one_store", [Tensor("x")], [Tensor("out")], "if (id == 0) out[0] = x[0];", GID
    )
    n = 4 << 20  # 16 MiB of float: over the 4 MiB from which results are mapped ahead
    (out,) = one_store(torch.full((1,), 7.0), grid=(1, 1, 1), group=(1, 1, 1), shapes=[[n]])
    assert out[0].item() == 7.0
    mapped, total = _mapped_pages(out)
    # One store touched one page; every page is mapped.
    assert mapped == total, f"{mapped} of {total} pages mapped"


@pytest.mark.skipif(not _populate_supported(), reason="the Linux kernel lacks MADV_POPULATE_WRITE")
def test_the_slices_of_many_groups_map_every_page_of_every_large_result() -> None:
    # 1024 groups over two large results of different sizes, each group storing
    # one element: the groups' slices must tile both results, page for page.
    first_store = kernel(
        "map_ahead_first_store",
        [Tensor("x")],
        [Tensor("small"), Tensor("big")],
        """
        if (id % 64 == 0) {
            small[id / 64] = x[0] + float(id);
            big[big.get_extent(0) - 1 - id] = float(id);
        }
        """,
        GID,
    )
    groups, per_group = 1024, 64
    small_n, big_n = (5 << 20) // 4, (12 << 20) // 4 + 3  # 5 MiB and 12 MiB (not whole pages)
    small, big = first_store(
        torch.full((1,), 0.5),
        grid=(groups * per_group, 1, 1),
        group=(per_group, 1, 1),
        shapes=[[small_n], [big_n]],
    )
    ids = torch.arange(0, groups * per_group, per_group, dtype=torch.float32)
    torch.testing.assert_close(small[:groups], ids + 0.5, rtol=0, atol=0)
    torch.testing.assert_close(
        big[big_n - groups * per_group :].flip(0)[::per_group], ids, rtol=0, atol=0
    )
    for result in (small, big):
        mapped, total = _mapped_pages(result)
        assert mapped == total, f"{mapped} of {total} pages mapped"
