"""A caching allocator for the tensors compiled graphs return to torch (the torch backend's outputs).

Why: a training step's outputs are large and short-lived (activations saved for backward, ~500 MB of
gradients on GPT-2-small), and glibc hands blocks that large straight back to the kernel when they are freed
(munmap). Each step then faults every page in again, and the kernel clears each one first: on GPT-2-small
that was ~0.15 s of a 1.5 s step. Like PyTorch's CUDA caching allocator, this pool keeps the blocks of freed
outputs and gives them to the next outputs of the same size class, whose pages are already there.

How a block comes back: the output is `torch.from_numpy` of a fresh NumPy view of the block; torch's
storage holds that view until the storage dies (the output and every view of it gone, autograd's saved
copies included), and a finalizer on the view returns the block. So a block is reused only once nothing can
see it, whatever the caller did with the tensor. The return only appends to a queue (it can run on any
thread: autograd's, a DataLoader's), which the next allocation drains.

What it holds: free blocks wait in per-size-class lists (4 classes per power of two, so an output takes at
most 25% more than it asked for; pages past its end are never touched). The free blocks never add up to more
than the most its outputs ever had lent at once (the oldest go back to the system first), so a change of
shapes does not pile up blocks of the old sizes: at worst the outputs' memory doubles, in a loop that repeats
its shapes (training, fixed-shape inference) it stays what the outputs need.
`trim()` returns every free block now (like torch.cuda.empty_cache); CKC_HOST_POOL=0 turns the pool off
(outputs then come from torch.empty, as before).

Outputs smaller than DIRECT (4 MiB) come from torch.empty: glibc serves those from its heap with their pages
in place once its mmap threshold has risen to the sizes freed (it does, up to 32 MiB), and the pool's Python
per output (a NumPy view, a finalizer) costs more there. Measured on the Zen 3 VM, one output allocated,
filled and dropped, pool vs torch.empty: 256 KiB 23 vs 11 us, 1 MiB 43 vs 29 us, 4 MiB 106 vs 102 us, 16 MiB
1.0 vs 1.5 ms, 64 MiB 6.9 vs 58 ms.
"""
import collections
import math
import os
import threading
import weakref

import numpy as np

SMALL = 64 * 1024  # bytes: the smallest size class
DIRECT = 4 << 20   # bytes: outputs below this come from torch.empty (see above)
ALIGN = 64         # bytes: the address every pooled output starts at a multiple of (AVX-512 lines)


def size_class(nbytes):
    """The bytes a block for nbytes has: nbytes rounded up to 4 steps per power of two."""
    if nbytes <= SMALL:
        return SMALL
    top = 1 << (nbytes - 1).bit_length()  # the power of two at or above nbytes
    step = top // 8                        # classes at 5/8, 6/8, 7/8 and 8/8 of it
    return -(-nbytes // step) * step


class HostPool:
    def __init__(self):
        # free blocks (uint8 arrays, ALIGN-aligned): per size class {id: block}, newest last (taken first), and
        # {id: size class} of all of them, oldest first (returned to the system first)
        self._free = collections.defaultdict(dict)
        self._order = collections.OrderedDict()
        self._returned = collections.deque()        # (class, block) given back by finalizers, not yet filed
        self._lock = threading.Lock()
        self.live = 0        # bytes of blocks lent out
        self.free = 0        # bytes of blocks waiting in the lists
        self.peak = 0        # the most bytes ever lent at once
        self.hits = 0
        self.misses = 0

    def _file_returned(self):
        while self._returned:
            cls, block = self._returned.popleft()
            self.live -= cls
            self.free += cls
            self._free[cls][id(block)] = block
            self._order[id(block)] = cls
        while self.free > self.peak:  # never more free than was ever lent at once
            self._drop_oldest()

    def _drop_oldest(self):
        key, cls = self._order.popitem(last=False)
        del self._free[cls][key]
        self.free -= cls

    def take(self, nbytes):
        """A uint8 array of at least nbytes, ALIGN-aligned, lent until the finalizer of a view returns it."""
        cls = size_class(nbytes)
        with self._lock:
            self._file_returned()
            blocks = self._free.get(cls)
            if blocks:
                key, block = blocks.popitem()
                del self._order[key]
                self.free -= cls
                self.hits += 1
            else:
                raw = np.empty(cls + ALIGN, np.uint8)
                start = -raw.ctypes.data % ALIGN
                block = raw[start:start + cls]
                self.misses += 1
            self.live += cls
            self.peak = max(self.peak, self.live)
            return cls, block

    def give_back(self, cls, block):
        self._returned.append((cls, block))  # any thread, no lock: filed by the next take()

    def trim(self):
        """Returns every free block to the system; outputs still in use stay lent."""
        with self._lock:
            self._file_returned()
            self._free.clear()
            self._order.clear()
            self.free = 0

    def empty(self, shape, torch_dtype, np_dtype):
        """An uninitialized torch tensor of this shape and dtype on pooled memory (torch.empty below DIRECT)."""
        import torch
        nbytes = math.prod(shape) * np.dtype(np_dtype).itemsize
        if nbytes < max(DIRECT, SMALL):
            return torch.empty(shape, dtype=torch_dtype)
        cls, block = self.take(nbytes)
        view = block[:nbytes].view(np_dtype).reshape(shape)
        weakref.finalize(view, self.give_back, cls, block).atexit = False
        return torch.from_numpy(view)


_POOL = None


def host_pool():
    """The process's pool, or None when CKC_HOST_POOL=0."""
    global _POOL
    if os.environ.get("CKC_HOST_POOL", "1") == "0":
        return None
    if _POOL is None:
        _POOL = HostPool()
    return _POOL


def trim():
    """Returns the free blocks of the pool to the system (outputs in use are not touched)."""
    if _POOL is not None:
        _POOL.trim()
