"""Huge pages for the weights a compiled library reads in place from PyTorch's memory.

A library ckc builds for torch.compile(backend="gcu") reads the module's parameters where PyTorch keeps them.
PyTorch's allocator leaves them on 4 KiB pages (measured: 0 kB AnonHugePages for three 16 MiB Linear weights,
with transparent huge pages "always" and defrag "madvise"), while the weights a library loads itself land on
2 MiB pages; streaming a matrix through 4 KiB pages costs a TLB miss per page, and a weight-bound graph ran
15% slower from PyTorch's memory than from a copy (mlp 1x2048 on the Zen 3 VM, the same library: 3.54 vs
3.06 ms). Linux 6.1's madvise(MADV_COLLAPSE) rewrites the 2 MiB-aligned part of a range onto huge pages in
place (same addresses, same contents, synchronously: ~30 ms per 48 MiB here), after which the same library
took 2.9 ms. It changes nothing but the page size, so the backend applies it to the parameters of every graph
it compiles (options={"huge_pages": False} turns it off); where the kernel refuses (older than 6.1, THP off,
no huge page to be had) nothing changes, and CK_DEBUG=1 says why once."""
import ctypes
import errno
import os
import sys

MADV_COLLAPSE = 25
HUGE = 2 << 20
MIN_BYTES = 2 * HUGE  # smaller tensors hold at most one huge page: not worth a collapse

_done = set()  # (start, end) of the ranges collapsed (or refused) in this process
_said = []
_madvise = []


def _libc_madvise():
    if not _madvise:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.madvise
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _madvise.append(fn)
    return _madvise[0]


def huge_range(ptr, nbytes):
    """The 2 MiB-aligned part [start, end) of the bytes [ptr, ptr + nbytes), or None when there is none."""
    start = (ptr + HUGE - 1) // HUGE * HUGE
    end = (ptr + nbytes) // HUGE * HUGE
    return (start, end) if end > start else None


def collapse(tensors):
    """madvise(MADV_COLLAPSE) over the storage of each tensor of at least MIN_BYTES (each range once per
    process). Returns the bytes now on huge pages by this call; never raises."""
    fn = _libc_madvise()
    if fn is None:
        return 0
    done = 0
    for t in tensors:
        try:
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
        except (AttributeError, RuntimeError):
            continue
        if nbytes < MIN_BYTES or t.device.type != "cpu":
            continue
        r = huge_range(ptr, nbytes)
        if r is None or r in _done:
            continue
        _done.add(r)
        if fn(r[0], r[1] - r[0], MADV_COLLAPSE) == 0:
            done += r[1] - r[0]
            continue
        err = ctypes.get_errno()
        if os.environ.get("CK_DEBUG") and not _said:
            _said.append(err)
            print(f"ckc: huge pages: madvise(MADV_COLLAPSE) refused ({errno.errorcode.get(err, err)}: "
                  f"{os.strerror(err)}); the parameters stay on the pages PyTorch gave them", file=sys.stderr)
    return done
