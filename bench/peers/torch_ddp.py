#!/usr/bin/python3
"""torch_ddp.py - the PyTorch DDP peer of ddp-worker (bench/ddp, bench/startup).

The same training as `ddp-worker` (docs/worker.md) written the usual PyTorch way:
torch.nn.Linear layers with ReLU between them (torch's default init: uniform +-1/sqrt(fan_in),
as ours), cross-entropy averaged over the local batch, SGD with momentum 0.9 (dampening 0),
lr = base * W, DistributedDataParallel over gloo (default bucket cap 25 MiB, first bucket
1 MiB, as ours), a DistributedSampler-like split (shuffle from seed + epoch, pad to a multiple
of W, rank r takes positions r, r+W, ...), batch B per rank. One thread per rank:
OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1) (the BLAS is whatever
libblas.so.3 is: bench/peers/setup.sh checks it is OpenBLAS, as ours).

Two ways to start it:
  /usr/bin/python3 bench/peers/torch_ddp.py --world W [flags]   spawns W ranks itself
  torchrun --standalone --nproc-per-node W --redirects 1 --tee 1 --log_dir DIR \\
      bench/peers/torch_ddp.py [flags]                           ranks from torchrun's env
Flags (ddp-worker's names): --model mlp:784-256-128-10, --data fashion-mnist |
synthetic:N:D:C, --epochs 1, --batch-size 32, --lr 0.01, --momentum 0.9, --bucket-cap-mb 25,
--seed 1, --max-steps N (stop after N steps), --first-step-dir DIR (each rank writes
DIR/rank-R holding time.time_ns() at the end of its first optimizer step: bench/startup).

Rank 0 prints per epoch `epoch 1/1 | loss 0.5 | test acc 0.8 | 12,345 samples/s` (samples/s:
global samples over the mean training time of the ranks, evaluation excluded, as ours) and at
the end one line
  RESULT samples_per_s=S peak_rss_kib=R0,R1,... model_bytes=M
peak_rss_kib: each rank's ru_maxrss (resource.getrusage) at the end; model_bytes: parameters
+ gradients + momentum + one data batch in bytes (the floor the memory goal is measured
against).
"""
import argparse
import gzip
import os
import resource
import socket
import struct
import sys
import time

DATA_DIR = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    """An IDX file (gzip or plain) as (dims, bytes)."""
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    if magic >> 8 != 0x08:
        raise SystemExit("%s: not an unsigned-byte IDX file (magic %#x)" % (path, magic))
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    arr = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd)
    return arr.reshape(dims)


def load_data(spec, seed):
    """(train_x, train_y, test_x, test_y) as float32 / int64 numpy arrays."""
    import numpy as np

    if spec == "fashion-mnist":
        def ld(img, lab):
            x = read_idx(os.path.join(DATA_DIR, img)).reshape(-1, 784).astype(np.float32)
            y = read_idx(os.path.join(DATA_DIR, lab)).astype(np.int64)
            return x, y
        tx, ty = ld("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
        vx, vy = ld("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
        # Mean and deviation over every pixel of the training set, summed in float64 by row
        # blocks (as ours: no float64 copy of the whole set at the peak).
        total, sq = 0.0, 0.0
        for i in range(0, len(tx), 4096):
            blk = tx[i:i + 4096].astype(np.float64)
            total += float(blk.sum())
            sq += float((blk * blk).sum())
        mean = total / tx.size
        sd = (sq / tx.size - mean * mean) ** 0.5
        for a in (tx, vx):  # in place: no second copy of the data set at the peak
            a -= mean
            a /= sd
        return tx, ty, vx, vy
    if spec.startswith("synthetic:"):
        n, d, c = (int(v) for v in spec.split(":")[1:])
        rng = np.random.default_rng(seed ^ 0x5EED0DA7A)
        centers = rng.standard_normal((c, d), dtype=np.float32)

        def fill(m):
            y = rng.integers(0, c, m)
            x = centers[y] + rng.standard_normal((m, d), dtype=np.float32)
            return x.astype(np.float32), y.astype(np.int64)
        tx, ty = fill(n)
        vx, vy = fill(max(n // 5, 1))
        return tx, ty, vx, vy
    raise SystemExit("--data: want fashion-mnist or synthetic:N:D:C, got %r" % spec)


def build_model(spec):
    import torch.nn as nn

    if not spec.startswith("mlp:"):
        raise SystemExit("--model: want mlp:W0-W1-...-Wn, got %r" % spec)
    widths = [int(w) for w in spec[4:].split("-")]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), widths


def train(rank, world, args):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    tx, ty, vx, vy = load_data(args.data, args.seed)
    net, widths = build_model(args.model)
    if widths[0] != tx.shape[1]:
        raise SystemExit("--model: input width %d != data's %d" % (widths[0], tx.shape[1]))
    model = DDP(net, bucket_cap_mb=args.bucket_cap_mb)  # broadcasts rank 0's parameters
    lr = args.lr * world
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    x_all, y_all = torch.from_numpy(tx), torch.from_numpy(ty)
    n = x_all.shape[0]
    per_rank = (n + world - 1) // world
    nparams = sum(p.numel() for p in net.parameters())
    step = 0
    stop = False
    for epoch in range(args.epochs):
        g = torch.Generator()
        g.manual_seed(args.seed + epoch)
        perm = torch.randperm(n, generator=g)
        if per_rank * world > n:
            perm = torch.cat([perm, perm[:per_rank * world - n]])
        mine = perm[rank::world]
        t0 = time.perf_counter()
        loss_sum, seen = 0.0, 0
        for start in range(0, per_rank, args.batch_size):
            idx = mine[start:start + args.batch_size]
            xb, yb = x_all.index_select(0, idx), y_all.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * idx.numel()
            seen += idx.numel()
            step += 1
            if step == 1 and args.first_step_dir:
                with open(os.path.join(args.first_step_dir, "rank-%d" % rank), "w") as f:
                    f.write("%d\n" % time.time_ns())
            if args.max_steps and step >= args.max_steps:
                stop = True
                break
        if stop:
            break
        secs = time.perf_counter() - t0
        with torch.no_grad():
            lo, hi = len(vx) * rank // world, len(vx) * (rank + 1) // world
            correct = (net(torch.from_numpy(vx[lo:hi])).argmax(1) ==
                       torch.from_numpy(vy[lo:hi])).sum().item()
        sums = torch.tensor([loss_sum, seen, correct, secs], dtype=torch.float64)
        dist.all_reduce(sums)
        if rank == 0:
            sps = sums[1].item() / (sums[3].item() / world)
            print("epoch %d/%d | loss %.4f | test acc %.4f | %s samples/s"
                  % (epoch + 1, args.epochs, sums[0].item() / sums[1].item(),
                     sums[2].item() / len(vx), "{:,.0f}".format(sps)))
            sys.stdout.flush()
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    all_rss = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(all_rss, rss)
    if rank == 0 and not stop:
        model_bytes = 4 * 3 * nparams + args.batch_size * (tx.shape[1] * 4 + 8)
        print("RESULT samples_per_s=%.1f peak_rss_kib=%s model_bytes=%d"
              % (sps, ",".join(str(int(r.item())) for r in all_rss), model_bytes))
        sys.stdout.flush()
    dist.destroy_process_group()


def spawned(rank, world, port, args):
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank)})
    train(rank, world, args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=0,
                    help="spawn W ranks (else RANK/WORLD_SIZE from torchrun)")
    ap.add_argument("--model", default="mlp:784-256-128-10")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--bucket-cap-mb", type=float, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--first-step-dir", default="")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if args.world > 0:
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(spawned, args=(args.world, port, args), nprocs=args.world, join=True)
    elif "RANK" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        ap.error("give --world W, or run under torchrun")


if __name__ == "__main__":
    main()
