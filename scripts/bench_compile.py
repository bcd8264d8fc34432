#!/usr/bin/env -S sh -c 'exec "$(dirname "$0")/py" "$0" "$@"'
"""How `ckc compile` scales with the graph: seconds and peak memory (the child's max RSS) for graphs of 1k, 10k
and 100k nodes (python/ckc/synthetic.py):

  chain      elementwise nodes in a line (fused into EW programs)
  chain-rev  the same listed last-first (the schema allows any order)
  mlp        Linear + activation layers in the nodes ckc.export writes (GEMMs, bias adds, transposes)
  exported   (--exported N) the same module really exported by ckc.export, for sizes up to N

    scripts/bench_compile.py [--sizes 1000,10000,100000] [--reps 3] [--baseline OTHER_CKC] [--exported 10000]

--baseline runs another ckc binary (an older build, say) on the same graphs, interleaved with this one, and prints
the ratio. The graphs are written to a temporary folder; nothing is kept.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import ckc
from ckc import synthetic
from ckc.contenders import machine


TIME = "/usr/bin/time"  # GNU time: the peak RSS of ckc itself


def timed(binary, graph, out, timeout):
    """(seconds, peak RSS MiB) of one compile. The peak is read by GNU time, a small process forking ckc: a child
    forked by this Python would count this Python's own pages in its ru_maxrss (Linux keeps the high-water mark
    of the image it replaced at exec)."""
    report = out + ".rss"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [binary, "compile", graph, "-o", out]
    if os.path.exists(TIME):
        cmd = [TIME, "-f", "%M", "-o", report] + cmd
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = t + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            os.wait4(p.pid, 0)
            return None, None
        time.sleep(0.002)
    seconds = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{binary} compile {graph} failed:\n{p.stderr.read().decode()[-2000:]}")
    if os.path.exists(TIME):
        with open(report) as f:
            return seconds, int(f.read().split()[-1]) / 1024
    return seconds, usage.ru_maxrss / 1024  # (includes this Python's pages: an upper bound)


def exported_mlp(n):
    """graph.json of nn.Sequential(Linear(8, 8), GELU, Linear, ReLU, ...) with n // 4 layers, as ckc.export writes
    it (4 nodes a layer), cached under the ckc cache (the export is slow for big modules)."""
    folder = os.path.join(ckc.build.cache_dir(), "bench-compile", f"exported{n}")
    graph = os.path.join(folder, "graph.json")
    if not os.path.exists(graph):  # (in another process: torch would stay in this one's memory)
        subprocess.run([sys.executable, "-c", f"""
import torch, ckc
torch.manual_seed(0)
layers = []
for i in range({n // 4}):
    layers += [torch.nn.Linear(8, 8), torch.nn.GELU() if i % 2 == 0 else torch.nn.ReLU()]
ckc.export(torch.nn.Sequential(*layers).eval(), (torch.randn(2, 8),), {folder!r})
"""], check=True)
    return graph


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="node counts (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="compiles per graph and binary; the median is shown")
    ap.add_argument("--baseline", help="another ckc binary to compare with, interleaved")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a compile may take before it is given up")
    ap.add_argument("--exported", type=int, default=0, metavar="MAX_NODES",
                    help="also graphs exported from a real nn.Sequential(Linear, GELU / ReLU, ...) by ckc.export, for "
                         "the sizes up to MAX_NODES (torch.export takes ~50 s for 10k nodes; cached in the ckc cache)")
    a = ap.parse_args()
    ours = ckc.ckc_binary()
    print(machine())
    print(f"ckc: {ours}" + (f"; baseline: {a.baseline}" if a.baseline else ""))
    head = f"{'graph':10s} {'nodes':>7s} {'seconds':>8s} {'peak MiB':>9s}"
    print(head + (f" {'baseline s':>10s} {'ratio':>6s}" if a.baseline else ""))
    with tempfile.TemporaryDirectory(prefix="ckc-bench-compile-") as d:
        for n in [int(x) for x in a.sizes.split(",")]:
            for kind in ("chain", "chain-rev", "mlp") + (("exported",) if n <= a.exported else ()):
                folder = os.path.join(d, f"{kind}{n}")
                if kind == "exported":
                    graph = exported_mlp(n)
                elif kind == "mlp":
                    doc, weights = synthetic.mlp(n // 4)
                    graph = synthetic.write(doc, folder, weights)
                else:
                    graph = synthetic.write(synthetic.chain(n, reverse=kind == "chain-rev"), folder)
                out = os.path.join(folder, "out", "model.c")
                times, rss, base = [], [], []
                for _ in range(a.reps):
                    s, m = timed(ours, graph, out, a.timeout)
                    times.append(s)
                    rss.append(m)
                    if a.baseline:
                        base.append(timed(a.baseline, graph, out, a.timeout)[0])
                t = statistics.median(times) if None not in times else None
                line = f"{kind:10s} {n:7d} " + (f"{t:8.2f} {max(rss):9.1f}" if t else f"{'timeout':>8s} {'':>9s}")
                if a.baseline:
                    b = statistics.median(base) if None not in base else None
                    line += f" {b:10.2f} {b / t:5.1f}x" if b and t else f" {'timeout':>10s}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
