"""The peer of bench/ddp: PyTorch DistributedDataParallel (gloo backend, CPU) training the
same MLP with the same per-rank batch, SGD with momentum, on random data held in memory.
Started by run.sh like ddp-worker, with the torchrun environment set by hand (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Prints "samples_per_s" on rank 0: global samples over
the wall time of all steps, the same measure ddp-worker prints for an epoch.
Usage: torch_ddp.py WIDTHS(784-256-128-10) STEPS BATCH BUCKET_CAP_MB
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    widths = [int(w) for w in sys.argv[1].split("-")]
    steps, batch, cap = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(1)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(steps * batch, widths[0])
    y = torch.randint(0, widths[-1], (steps * batch,))
    t0 = time.perf_counter()
    for s in range(steps):
        xb = x[s * batch:(s + 1) * batch]
        yb = y[s * batch:(s + 1) * batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
    secs = time.perf_counter() - t0
    if world > 1:
        t = torch.tensor([secs], dtype=torch.float64)
        dist.all_reduce(t)
        secs = t.item() / world
        dist.destroy_process_group()
    if rank == 0:
        print("%.0f" % (world * batch * steps / secs))


if __name__ == "__main__":
    main()
