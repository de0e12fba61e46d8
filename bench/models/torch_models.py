#!/usr/bin/python3
"""torch_models.py - the PyTorch DDP peer of ddp-worker for the CNN and the GPT (bench/models).

The same model ddp-worker trains (tests/unit/model_cnn_torch.py's network for cnn:SPEC,
tests/unit/model_gpt_torch.py's Gpt for gpt:L-H-D-T), DistributedDataParallel over gloo
(bucket cap 25 MiB), batch B per rank, one thread per rank (OMP_NUM_THREADS=1,
torch.set_num_threads(1); the BLAS is Debian's, as ours), STEPS steps:
  cnn: SGD momentum 0.9, lr 0.01 x W, random 1x28x28 images and labels;
  gpt: AdamW (0.9, 0.999), lr 3e-3, clipping at 1.0, windows of T+1 bytes of --text in order.
Prints one line
  RESULT per_s=X peak_rss_kib=R0,R1,...
per_s: samples/s (cnn) or tokens/s (gpt), global, over the mean training time of the ranks.

usage: torch_models.py --world W --model SPEC [--steps N] [--batch-size B] [--text FILE] [--zero]
--zero: the optimizer wrapped in torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1:
each rank keeps and updates its shard of the state; bench/fsdp's peer).
"""
import argparse
import importlib.util
import os
import resource
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.join(HERE, "..", "..", "tests", "unit")


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(UNIT, name + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def train(rank, world, port, args):
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    b = args.batch_size
    if args.model.startswith("cnn:"):
        net = load_module("model_cnn_torch").build(args.model)
        x = torch.randn(args.steps * b, 1, 28, 28)
        y = torch.randint(0, 10, (args.steps * b,))
        opt_maker = lambda p: torch.optim.SGD(p, lr=0.01 * world, momentum=0.9)
        per_step = b
    else:
        L, H, D, T = (int(v) for v in args.model[4:].split("-"))
        net = load_module("model_gpt_torch").Gpt(L, H, D, T)
        raw = np.fromfile(args.text, dtype=np.uint8).astype(np.int64)
        n = (len(raw) - 1) // T
        idx = np.arange(n)[:, None] * T + np.arange(T + 1)[None, :]
        win = torch.from_numpy(raw[idx])
        opt_maker = lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.0)
        per_step = b * T
    model = DDP(net, bucket_cap_mb=25)
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        cls = torch.optim.SGD if args.model.startswith("cnn:") else torch.optim.AdamW
        kw = dict(lr=0.01 * world, momentum=0.9) if cls is torch.optim.SGD else \
            dict(lr=3e-3, weight_decay=0.0)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, **kw)
    else:
        opt = opt_maker(model.parameters())
    t0 = time.perf_counter()
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        if args.model.startswith("cnn:"):
            loss = F.cross_entropy(model(x[s * b:(s + 1) * b]), y[s * b:(s + 1) * b])
        else:
            k = (s * world + rank) % (len(win) // b)
            w = win[k * b:(k + 1) * b]
            logits = model(w[:, :T])
            loss = F.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1))
        loss.backward()
        if not args.model.startswith("cnn:"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    secs = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(secs)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    all_rss = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(all_rss, rss)
    if rank == 0:
        per_s = args.steps * per_step * world / (secs.item() / world)
        print("RESULT per_s=%.1f peak_rss_kib=%s" %
              (per_s, ",".join(str(int(r.item())) for r in all_rss)))
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--text", default="")
    ap.add_argument("--zero", action="store_true")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(args.world, port, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
