"""ckc.hugepages: the backend moves the parameters its libraries read in place onto huge pages (Linux's
MADV_COLLAPSE), without changing an address or a value, and leaves them with options={"huge_pages": False}."""
import sys

import numpy as np
import pytest
import torch

import ckc
from ckc import hugepages

HUGE = hugepages.HUGE


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CKC_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()


def huge_kb(addr):
    """AnonHugePages (kB) of the mapping holding addr (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def test_the_aligned_part_of_a_range():
    assert hugepages.huge_range(HUGE + 5, 3 * HUGE) == (2 * HUGE, 4 * HUGE)
    assert hugepages.huge_range(2 * HUGE, 2 * HUGE) == (2 * HUGE, 4 * HUGE)
    assert hugepages.huge_range(HUGE + 1, HUGE) is None  # no whole huge page inside
    assert hugepages.huge_range(0, HUGE - 1) is None


class Wide(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.fc(x))


MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15


def small_pages_module(d, keep):
    """A Wide(d) whose weight lives in its own anonymous mapping, faulted in on 4 KiB pages (MADV_NOHUGEPAGE while it
    is written, then cleared), so that the backend is all that changes its pages: PyTorch's own allocator may serve
    a weight from a heap whose pages other tests already changed. Returns (module, the weight's 2 MiB-aligned part)."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    nbytes = d * d * 4
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if libc.madvise(addr, nbytes, MADV_NOHUGEPAGE) != 0:
        pytest.skip("this kernel has no transparent huge pages")
    w = np.frombuffer(buf, dtype=np.float32).reshape(d, d)
    w[:] = np.random.default_rng(0).standard_normal((d, d), dtype=np.float32) / d ** 0.5
    assert libc.madvise(addr, nbytes, MADV_HUGEPAGE) == 0
    keep.append(buf)
    m = Wide(d).eval()
    m.fc.weight = torch.nn.Parameter(torch.from_numpy(w))
    r = hugepages.huge_range(addr, nbytes)
    assert huge_kb(r[0]) == 0
    return m, r


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_COLLAPSE is Linux's")
def test_the_backend_moves_parameters_onto_huge_pages_in_place():
    keep = []
    m, r = small_pages_module(1536, keep)  # 9 MiB: at least three whole huge pages
    x = torch.randn(3, m.fc.in_features)
    with torch.no_grad():
        want = m(x)
    before = (m.fc.weight.data_ptr(), m.fc.weight.detach().clone())
    collapsed = []
    orig = hugepages.collapse

    def spy(ts):
        collapsed.append(orig(ts))
        return collapsed[-1]
    hugepages.collapse = spy
    try:
        fast = torch.compile(m, backend="gcu")
        with torch.no_grad():
            got = fast(x)
    finally:
        hugepages.collapse = orig
    if collapsed == [0]:
        pytest.skip("this kernel refuses MADV_COLLAPSE (Linux < 6.1, THP off, or no huge page free)")
    assert collapsed and collapsed[0] >= r[1] - r[0]
    assert huge_kb(r[0]) >= (r[1] - r[0]) // 1024  # the aligned part is on huge pages now
    assert m.fc.weight.data_ptr() == before[0] and torch.equal(m.fc.weight, before[1])  # same place, same values
    assert (got - want).abs().max().item() < 1e-4
    # each range once per process
    assert hugepages.collapse([m.fc.weight]) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_COLLAPSE is Linux's")
def test_huge_pages_false_leaves_them():
    keep = []
    m, r = small_pages_module(1600, keep)
    fast = torch.compile(m, backend="gcu", options={"huge_pages": False})
    with torch.no_grad():
        fast(torch.randn(2, m.fc.in_features))
    assert huge_kb(r[0]) == 0


def test_a_bad_huge_pages_option_is_refused():
    with pytest.raises(Exception) as e:  # (dynamo wraps the backend's ValueError)
        torch.compile(Wide(8), backend="gcu", options={"huge_pages": "yes"})(torch.randn(1, 8))
    assert "huge_pages 'yes'; True (move the parameters onto huge pages) or False" in str(e.value)
    with pytest.raises(ValueError, match="huge_pages'] is for torch.compile"):
        ckc.aot_compile(Wide(8), (torch.randn(1, 8),), "/nonexistent/x", options={"huge_pages": True})
