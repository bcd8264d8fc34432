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


# the CPU features a kernel's speed depends on (what /proc/cpuinfo calls them)
_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512vbmi", "avx512_bitalg", "avx512_vnni",
          "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve")


def machine():
    """One line for a benchmark's header: the CPU model, the cores, and the SIMD features it has (a speed holds on
    the machine it was measured on)."""
    import os
    import platform
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    have = [f for f in _FLAGS if f in flags]
    return f"CPU: {model}, {os.cpu_count()} cores; {' '.join(have) or 'no SIMD flags read'}"
