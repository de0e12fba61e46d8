#!/usr/bin/python3
"""gloo_allreduce.py - the PyTorch gloo peer of bench/allreduce.

Times torch.distributed.all_reduce (backend gloo, float32, sum) the way ddp-bench-allreduce
times ours and prints the same columns (nccl-tests' all_reduce_perf columns):

    /usr/bin/python3 bench/peers/gloo_allreduce.py --world W [--min-bytes 4096]
        [--max-bytes 67108864] [--factor 4] [--warmup 3] [--iters 0 (auto)]
        [--op all_reduce|all_gather|reduce_scatter]

--op all_gather times dist.all_gather (a list of W shard views of one output tensor, out of
place; gloo in Debian's torch 1.13 has no all_gather_into_tensor); size is the whole output,
busbw = algbw * (W-1)/W, as ddp-bench-allreduce --op all-gather. --op reduce_scatter: gloo in
torch 1.13 has no reduce-scatter at all (reduce_scatter and reduce_scatter_tensor raise), so
it times what a gloo user does instead, an all_reduce of the whole buffer, and says so in its
header; busbw is computed as for a reduce-scatter of that size.

W rank processes (torch.multiprocessing spawn) rendezvous over TCP on 127.0.0.1; one torch
thread per rank (as ours: one comm thread per rank). For each size: warm-up iterations, then
timed iterations each preceded by a barrier; an iteration's time is the slowest rank's (a MAX
all-reduce of the per-rank times), the reported time the median over iterations.
algbw = bytes / time, busbw = algbw * 2(W-1)/W. Iteration count: 256 MiB / size, clamped to
5..50 (ours).
"""
import argparse
import os
import socket
import statistics
import sys
import time


def auto_iters(nbytes):
    return max(5, min(50, (256 << 20) // max(nbytes, 1)))


def rank_main(rank, args, port):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=args.world)
    w = args.world
    buf = (torch.arange(args.max_bytes // 4, dtype=torch.float32) % 17) * 0.25
    op = args.op
    if op == "reduce_scatter":
        try:  # only if this torch's gloo has one after all
            dist.reduce_scatter(torch.zeros(1), [torch.zeros(1) for _ in range(w)])
        except RuntimeError:
            op = "all_reduce (gloo has no reduce_scatter)"
    if rank == 0:
        print("# torch %s gloo %s, %d ranks (processes) on 127.0.0.1, "
              "torch threads 1" % (torch.__version__, op, w))
        print("%12s %12s %6s %12s %10s %10s" % ("size(B)", "count", "type", "time(us)",
                                                "algbw(GB/s)", "busbw(GB/s)"))
        sys.stdout.flush()
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        t = buf[:count]
        shard = count // w
        part = torch.ones(shard, dtype=torch.float32)
        outs = list(t[:shard * w].chunk(w))
        if op == "all_gather":
            def run():
                dist.all_gather(outs, part)
        elif op == "reduce_scatter":
            parts = list(t[:shard * w].chunk(w))

            def run():
                dist.reduce_scatter(part, parts)
        else:
            def run():
                dist.all_reduce(t)
        n = args.iters if args.iters > 0 else auto_iters(nbytes)
        for _ in range(args.warmup):
            run()
        times = torch.zeros(n, dtype=torch.float64)
        for i in range(n):
            dist.barrier()
            t0 = time.perf_counter()
            run()
            times[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        if rank == 0:
            us = statistics.median(times.tolist())
            algbw = nbytes / (us * 1e-6) / 1e9
            busbw = algbw * (2.0 if args.op == "all_reduce" else 1.0) * (w - 1) / w
            print("%12d %12d %6s %12.1f %10.3f %10.3f" % (nbytes, count, "float", us, algbw,
                                                          busbw))
            sys.stdout.flush()
        nbytes *= args.factor
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--op", default="all_reduce",
                    choices=["all_reduce", "all_gather", "reduce_scatter"])
    args = ap.parse_args()
    if args.world < 1 or args.min_bytes < 4 or args.max_bytes < args.min_bytes \
            or args.factor < 2:
        ap.error("need world >= 1, 4 <= min-bytes <= max-bytes, factor >= 2")
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
