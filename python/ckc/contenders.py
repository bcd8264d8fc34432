"""The PyTorch setups the benchmarks (scripts/bench_*.py) compare against.

  torch        torch.set_num_threads(threads): PyTorch's defaults
  torch-tuned  1 intra-op thread + `threads` OpenBLAS threads, with OMP_WAIT_POLICY=passive in the
               worker's environment: the fastest PyTorch setup found on a 2-core machine, where the
               default OpenMP pool spinning next to OpenBLAS's pool costs ~3x
"""
import ctypes


def worker_env(kind, env):
    """The environment a contender's worker process starts with."""
    env = dict(env)
    if kind == "torch-tuned":
        env["OMP_WAIT_POLICY"] = "passive"
    return env


def configure_torch(kind, threads):
    """Sets up PyTorch's threads in a worker for contender `kind`."""
    import torch
    if kind == "torch-tuned":
        torch.set_num_threads(1)
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(threads)
    else:
        torch.set_num_threads(threads)
