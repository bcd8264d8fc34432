"""The PyTorch setups the benchmarks (scripts/bench_*.py) compare against.

  torch        torch.set_num_threads(threads): PyTorch's defaults
  torch-tuned  the same with OMP_WAIT_POLICY=passive in the worker's environment, so that PyTorch's
               OpenMP pool does not spin on the cores between ops (on a 2-core machine, with Debian's
               OpenBLAS-based torch 1.13, spinning pools cost ~3x; pip's torch 2.x uses MKL inside
               its own OpenMP pool)
"""


def worker_env(kind, env):
    """The environment a contender's worker process starts with."""
    env = dict(env)
    if kind == "torch-tuned":
        env["OMP_WAIT_POLICY"] = "passive"
    return env


def configure_torch(kind, threads):
    """Sets up PyTorch's threads in a worker for contender `kind`."""
    import torch
    torch.set_num_threads(threads)
