"""What the gcu backend made of each graph: per ATen node, compiled (in which partition) or eager, and why.

ckc.explain collects every graph's GraphReport while it runs (collecting()); the backend logs each one and
warns about the ops left to eager."""
import contextlib
from dataclasses import dataclass, field


@dataclass
class NodeReport:
    node: str
    op: str
    compiled: bool
    partition: str = ""
    reason: str = ""
    fallback: str = "eager"  # a node ckc does not run: "eager" (PyTorch, op by op) or the Inductor graph running it


@dataclass
class GraphReport:
    """What one compiled graph became: one row per ATen node."""
    name: str
    shapes: str
    nodes: list = field(default_factory=list)
    partitions: int = 0

    def eager(self):
        return [n for n in self.nodes if not n.compiled]

    def __str__(self):
        lines = [f"graph {self.name} {self.shapes}: {len(self.nodes) - len(self.eager())} of {len(self.nodes)} "
                 f"nodes compiled in {self.partitions} partition(s)"]
        for n in self.nodes:
            where = f"compiled ({n.partition})" if n.compiled else \
                "eager" if n.fallback == "eager" else f"inductor ({n.fallback})"
            lines.append(f"  {n.node:<24} {n.op:<32} {where}{': ' + n.reason if n.reason else ''}")
        return "\n".join(lines)


class Reports(list):
    """Every graph's report, in compile order (what ckc.explain returns)."""

    def __str__(self):
        return "\n".join(map(str, self)) if self else "no graph was compiled"


_collector = None  # a Reports list while collecting() runs


def collect(report):
    """Hands a graph's report to ckc.explain when it is collecting."""
    if _collector is not None:
        _collector.append(report)


@contextlib.contextmanager
def collecting():
    """The Reports of every graph compiled inside the block."""
    global _collector
    _collector = Reports()
    try:
        yield _collector
    finally:
        _collector = None
