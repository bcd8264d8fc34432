"""One rank of the DistributedDataParallel test (test_distributed.py): python ddp_worker.py RANK WORLD PORT OUT.

Trains two copies of one model side by side in the same gloo process group, for STEPS steps on this rank's
own batches: DDP over the eager module, and DDP over torch.compile(module, backend="gcu") (the pattern of
torch's DDP documentation: compile the module, wrap it). After every backward it records both losses and the
largest difference between the two copies' (all-reduced) gradients; rank 0 also records what the gcu backend
compiled. Writes a JSON file."""
import json
import sys

import torch
import torch.distributed as dist

STEPS = 20


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def main(rank, world, port, out):
    import ckc  # noqa: F401  (registers the gcu backend)
    from ckc.conductor.report import collecting
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    eager_m, gcu_m = model(), model()
    eager, fast = DDP(eager_m), DDP(torch.compile(gcu_m, backend="gcu"))
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
            grad_diffs.append(max(float((a.grad - b.grad).abs().max())
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
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
