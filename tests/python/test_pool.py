"""ckc.pool: the caching allocator behind the tensors compiled graphs hand to torch (GraphModel.torch_runner,
so the torch backend's outputs: activations, gradients). A block is lent again only once torch can no longer
see it (its storage died: the tensor and every view gone), the free blocks never add up to more than was ever
lent at once, and CKC_HOST_POOL=0 gives torch.empty's tensors back."""
import threading

import numpy as np
import pytest
import torch

import ckc
from ckc import pool
from ckc.pool import ALIGN, SMALL, HostPool, size_class

BIG = (256, 768)  # 768 KiB of f32: pooled (the tests of the allocator's mechanics pool from SMALL on)


@pytest.fixture(autouse=True)
def pool_from_small(request, monkeypatch):
    """Outputs below pool.DIRECT come from torch.empty; these tests (but the one about that threshold) lower it to
    SMALL, so the mechanics are tested on blocks of a few hundred KiB."""
    if "direct" not in request.node.name:
        monkeypatch.setattr(pool, "DIRECT", SMALL)


def test_outputs_below_direct_come_from_torch_empty():
    p = HostPool()
    below = p.empty((pool.DIRECT // 4 - 1,), torch.float32, np.float32)
    assert p.misses == 0 and p.live == 0  # torch.empty's
    below.resize_(10)  # (a pooled storage is not resizable)
    at = p.empty((pool.DIRECT // 4,), torch.float32, np.float32)
    assert p.misses == 1 and p.live == size_class(pool.DIRECT) and at.data_ptr() % ALIGN == 0


def test_size_classes_round_up_by_at_most_a_quarter():
    assert size_class(1) == SMALL and size_class(SMALL) == SMALL
    for n in (SMALL + 1, 3 << 20, (5 << 20) + 7, 154389504, 9437184):
        c = size_class(n)
        assert n <= c < n * 1.25 + 4096, (n, c)
        assert size_class(c) == c  # a class is its own class
    assert size_class(9437184) == size_class(9437184 + 1000)  # close sizes share blocks


def test_a_block_comes_back_only_when_its_storage_dies():
    p = HostPool()
    t = p.empty(BIG, torch.float32, np.float32)
    assert t.data_ptr() % ALIGN == 0 and tuple(t.shape) == BIG and t.dtype == torch.float32
    address = t.data_ptr()
    view = t.view(-1)[100:]
    del t
    u = p.empty(BIG, torch.float32, np.float32)  # the view still sees the first block: a new one
    assert u.data_ptr() != address and p.misses == 2 and p.hits == 0
    del view
    w = p.empty(BIG, torch.float32, np.float32)  # now it is free: lent again, pages already there
    assert w.data_ptr() == address and p.hits == 1


def test_autograd_keeps_a_saved_output_alive():
    p = HostPool()
    a = p.empty(BIG, torch.float32, np.float32).normal_().requires_grad_()
    address = a.data_ptr()
    y = (a * a).sum()  # mul saves a for its backward
    del a
    b = p.empty(BIG, torch.float32, np.float32)
    assert b.data_ptr() != address
    y.backward()  # frees what mul saved
    del y
    assert p.empty(BIG, torch.float32, np.float32).data_ptr() == address


def test_free_blocks_never_exceed_the_most_ever_lent():
    p = HostPool()
    held = [p.empty((1 << 18,), torch.float32, np.float32) for _ in range(4)]  # 4 x 1 MiB lent at once
    assert p.peak == 4 << 20
    del held
    most, sizes = 0, [int(SMALL * 1.25 ** k) // 4 for k in range(2, 17)]  # f32 counts: 15 classes, all < 4 MiB
    assert len({size_class(4 * n) for n in sizes}) == len(sizes)
    for n in sizes:  # one at a time, each freed before the next, none fits another's block
        t = p.empty((n,), torch.float32, np.float32)
        del t
        p._file_returned()  # (the next take would file it)
        most = max(most, p.free)
        assert p.free <= p.peak == 4 << 20, (n, p.free, p.peak)
    assert p.misses == 4 + len(sizes) and most > 2 << 20  # they piled up to the cap, then the oldest went


def test_trim_returns_the_free_blocks_and_keeps_the_lent_ones():
    p = HostPool()
    kept = p.empty(BIG, torch.float32, np.float32).fill_(3.0)
    dropped = p.empty(BIG, torch.float32, np.float32)
    del dropped
    p.trim()
    assert p.free == 0 and p.live == size_class(BIG[0] * BIG[1] * 4)
    assert float(kept.sum()) == 3.0 * BIG[0] * BIG[1]


def test_a_tensor_freed_on_another_thread_comes_back():
    p = HostPool()
    box = [p.empty(BIG, torch.float32, np.float32)]
    address = box[0].data_ptr()
    th = threading.Thread(target=box.clear)
    th.start()
    th.join()
    assert p.empty(BIG, torch.float32, np.float32).data_ptr() == address


def test_small_outputs_and_other_dtypes():
    p = HostPool()
    s = p.empty((3, 5), torch.float32, np.float32)
    assert p.misses == 0 and tuple(s.shape) == (3, 5)  # torch.empty
    for td, nd in ((torch.int64, np.int64), (torch.int32, np.int32), (torch.bool, np.bool_)):
        t = p.empty((512, 512), td, nd)
        assert t.dtype == td and tuple(t.shape) == (512, 512) and t.is_contiguous()


def _doubler(compile_graph):
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2.0
    return ckc.GraphModel(compile_graph("pool-double", Double(), (torch.zeros(*BIG),)).so)


def test_graph_outputs_come_from_the_pool_and_a_held_output_is_never_overwritten(compile_graph, monkeypatch):
    monkeypatch.setattr(pool, "_POOL", HostPool())
    monkeypatch.delenv("CKC_HOST_POOL", raising=False)
    g = _doubler(compile_graph)
    run = g.torch_runner()
    x = torch.randn(*BIG)
    first, = run(x)
    address = first.data_ptr()
    second, = run(x + 1)  # first is held: another block
    assert second.data_ptr() != address
    assert torch.equal(first, x * 2) and torch.equal(second, (x + 1) * 2)
    del first
    third, = run(x + 2)  # the first block, free again
    assert third.data_ptr() == address and torch.equal(third, (x + 2) * 2)
    assert pool._POOL.hits == 1


def test_ckc_host_pool_0_turns_it_off(compile_graph, monkeypatch):
    monkeypatch.setattr(pool, "_POOL", None)
    monkeypatch.setenv("CKC_HOST_POOL", "0")
    run = _doubler(compile_graph).torch_runner()
    out, = run(torch.ones(*BIG))
    assert pool._POOL is None and torch.equal(out, torch.full(BIG, 2.0))
    out.resize_(10)  # torch.empty's storage (the pool's is not resizable)

