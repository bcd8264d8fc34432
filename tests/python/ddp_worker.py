"""One rank of the data-parallel tests (test_distributed.py): python ddp_worker.py MODE RANK WORLD PORT OUT.

Trains two copies of one model side by side in the same gloo process group, for STEPS steps on this rank's
own batches, one eager and one through the gcu backend:
  ddp    DDP over the module / DDP over torch.compile(module, backend="gcu") (torch's DDP documentation: compile
         the module, then wrap it)
  fsdp2  fully_shard on every Linear and on the root, then (the gcu copy) each child's forward compiled: FSDP2's
         hooks are torch._dynamo.disable'd, so compiling the whole sharded module captures no graph at all; a
         module's forward runs between its hooks, on the gathered parameters
After every backward it records both losses and the largest difference between the two copies' gradients
(all-reduced; with fsdp2 this rank's shards); it also records what the gcu backend compiled. Writes JSON."""
import json
import sys

import torch
import torch.distributed as dist

STEPS = 20


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def local(t):
    """A gradient as a plain tensor: FSDP2's are DTensors sharded over the ranks (this rank's shard)."""
    return t.to_local() if hasattr(t, "to_local") else t


def main(mode, rank, world, port, out):
    import ckc  # noqa: F401  (registers the gcu backend)
    from ckc.conductor.report import collecting
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    eager_m, gcu_m = model(), model()
    if mode == "ddp":
        eager, fast = DDP(eager_m), DDP(torch.compile(gcu_m, backend="gcu"))
    else:
        from torch.distributed.fsdp import fully_shard
        for m in (eager_m, gcu_m):
            for layer in m:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            fully_shard(m)
        for layer in gcu_m:
            layer.forward = torch.compile(layer.forward, backend="gcu")
        eager, fast = eager_m, gcu_m
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager_m, gcu_m)]
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data: DDP averages the gradients
    losses, grad_diffs = [], []
    with collecting() as reports:
        for _ in range(STEPS):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            step = []
            for net, opt in zip((eager, fast), opts):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                step.append(loss.item())
            grad_diffs.append(max(float((local(a.grad) - local(b.grad)).abs().max())
                                  for a, b in zip(eager_m.parameters(), gcu_m.parameters())))
            for opt in opts:
                opt.step()
            losses.append(step)
    compiled = [{"name": r.name, "compiled": sum(n.compiled for n in r.nodes), "nodes": len(r.nodes)}
                for r in reports]
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump({"losses": losses, "grad_diffs": grad_diffs, "graphs": compiled}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
