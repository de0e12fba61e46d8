#!/usr/bin/python3
"""ddp_side_by_side.py - ddp-worker against PyTorch DDP (bench/peers/torch_ddp.py), the same
model, data, batch, optimizer and world size, one thread per rank, alternating runs; prints one
table of samples/s and peak memory per rank with the ratios. Called by bench/ddp/run.sh.

    ddp_side_by_side.py --worker BUILD/bin/ddp-worker [--reps 3] [--configs main,fashion,large]

Configurations (batch 32 per rank, SGD momentum 0.9, lr 0.01 x W, bucket cap 25 MiB, 1 epoch):
  fashion  mlp:784-256-128-10 on Fashion-MNIST (60,000 samples: the main job's epoch)
  main     mlp:784-256-128-10 on synthetic:(W*32*300):784:10 (bench/ddp's main row)
  large    mlp:1024-4096-4096-10 on synthetic:(W*32*20):1024:10 (bench/ddp's large row)
at W = 1 and 2. Ours: W ddp-worker processes with the torchrun environment (rank 0's
"N samples/s" epoch line); peak RSS of each rank from wait4's ru_maxrss, and its peak PSS
polled from /proc. Theirs: torch_ddp.py
--world W (its RESULT line: samples/s the same way, ru_maxrss of each rank). Each cell is the
median over --reps runs; the ratio is the median of the ratios of runs side by side (ours,
then theirs, alternating: robust to the load drifting over the run). Memory floor = parameters + gradients + momentum + one batch (float32);
data = the data set each rank holds (train + test, float32), which both sides load whole.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_DDP = os.path.join(HERE, "torch_ddp.py")
BATCH = 32


def nparams(model):
    w = [int(v) for v in model[4:].split("-")]
    return sum(w[i] * w[i + 1] + w[i + 1] for i in range(len(w) - 1))


def config(name, w):
    """(model, data spec, samples in train set, features)"""
    if name == "fashion":
        return "mlp:784-256-128-10", "fashion-mnist", 60000, 784
    if name == "main":
        n = w * BATCH * 300
        return "mlp:784-256-128-10", "synthetic:%d:784:10" % n, n, 784
    if name == "large":
        n = w * BATCH * 20
        return "mlp:1024-4096-4096-10", "synthetic:%d:1024:10" % n, n, 1024
    raise SystemExit("unknown config %r" % name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ours(worker, model, data, w):
    port = free_port()
    procs = []
    with tempfile.TemporaryDirectory(prefix="ddp-sbs-") as d:
        for r in range(w):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       WORLD_SIZE=str(w), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(w),
                       GROUP_RANK="0", GROUP_WORLD_SIZE="1", OMP_NUM_THREADS="1",
                       DDP_LOG_LEVEL="warn")
            out = open(os.path.join(d, "out%d" % r), "w")
            procs.append(subprocess.Popen(
                [worker, "--model", model, "--data", data, "--epochs", "1", "--batch-size",
                 str(BATCH), "--bucket-cap-mb", "25"], stdout=out, stderr=subprocess.STDOUT,
                env=env))
            out.close()
        rss, bad = [], []
        pss = {p.pid: 0 for p in procs}
        deadline = time.monotonic() + 900
        for r, p in enumerate(procs):
            while True:
                for q in procs:
                    pss[q.pid] = max(pss[q.pid], pss_kib(q.pid))
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    for q in procs:
                        q.kill()
                    raise SystemExit("ddp-worker W=%d %s %s: no end after 900 s" % (w, model,
                                                                                   data))
                time.sleep(0.05)
            p.returncode = os.waitstatus_to_exitcode(status)
            rss.append(ru.ru_maxrss)
            if p.returncode != 0:
                bad.append(r)
        text = open(os.path.join(d, "out0")).read()
        if bad:
            raise SystemExit("ddp-worker rank(s) %s failed:\n%s" % (bad, text[-2000:]))
    m = re.search(r"\| ([0-9,]+) samples/s", text)
    if not m:
        raise SystemExit("ddp-worker printed no samples/s:\n" + text[-2000:])
    return float(m.group(1).replace(",", "")), max(rss), max(pss.values())


def pss_kib(pid):
    """The process's proportional set size (shared pages divided among the processes mapping
    them), 0 once it is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_torch(model, data, w):
    p = subprocess.run(["/usr/bin/python3", TORCH_DDP, "--world", str(w), "--model", model,
                        "--data", data, "--epochs", "1", "--batch-size", str(BATCH),
                        "--bucket-cap-mb", "25"], capture_output=True, text=True, timeout=900)
    m = re.search(r"RESULT samples_per_s=([0-9.]+) peak_rss_kib=([0-9,]+)", p.stdout)
    if p.returncode != 0 or not m:
        raise SystemExit("torch_ddp.py W=%d failed (%d):\n%s" % (w, p.returncode,
                                                                 (p.stdout + p.stderr)[-2000:]))
    return float(m.group(1)), max(int(v) for v in m.group(2).split(","))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--configs", default="fashion,main,large")
    ap.add_argument("--worlds", default="1,2")
    args = ap.parse_args()
    rows = []
    for name in args.configs.split(","):
        for w in (int(v) for v in args.worlds.split(",")):
            model, data, n, dim = config(name, w)
            ours, theirs = [], []
            for _ in range(args.reps):
                ours.append(run_ours(args.worker, model, data, w))
                theirs.append(run_torch(model, data, w))
            o_sps = statistics.median(v[0] for v in ours)
            t_sps = statistics.median(v[0] for v in theirs)
            o_rss = statistics.median(v[1] for v in ours) / 1024
            o_pss = statistics.median(v[2] for v in ours) / 1024
            t_rss = statistics.median(v[1] for v in theirs) / 1024
            floor = (12 * nparams(model) + BATCH * (dim * 4 + 8)) / 2**20
            dset = (n + max(n // 5, 1) if name != "fashion" else 70000) * dim * 4 / 2**20
            # Runs alternate, so pair them: the median of the paired ratios follows the load's
            # drift better than the ratio of the medians.
            ratio = statistics.median(o[0] / t[0] for o, t in zip(ours, theirs))
            rows.append((name, model, w, o_sps, t_sps, ratio, o_rss, o_pss, t_rss, floor, dset))
            print("# %s W=%d: ours %s; torch %s" % (
                name, w, " ".join("%.0f" % v[0] for v in ours),
                " ".join("%.0f" % v[0] for v in theirs)), file=sys.stderr)
    print("# ddp-worker vs PyTorch DDP (gloo), batch %d/rank, 1 thread/rank, median of %d runs"
          % (BATCH, args.reps))
    print("%-8s %-22s %2s %10s %10s %8s %9s %9s %9s %8s %8s %9s %9s" % (
        "data", "model", "W", "ours/s", "torch/s", "ratio", "ours_MiB", "ours_PSS", "torch_MiB",
        "floor", "dataset", "pss/fl", "pss/fl+d"))
    for name, model, w, o_sps, t_sps, ratio, o_rss, o_pss, t_rss, floor, dset in rows:
        print("%-8s %-22s %2d %10.0f %10.0f %7.2fx %9.0f %9.0f %9.0f %8.1f %8.1f %8.2fx %8.2fx" % (
            name, model[4:], w, o_sps, t_sps, ratio, o_rss, o_pss, t_rss, floor, dset,
            o_pss / floor, o_pss / (floor + dset)))
    print("# ratio = median over the runs of samples/s ours / torch of the run beside it (> 1: "
          "ours faster); *_MiB = peak RSS per rank (max over ranks); ours_PSS = peak "
          "proportional set size per rank (max over ranks, /proc/PID/smaps_rollup every 50 ms): "
          "RSS counts every page a rank maps, so with W > 1 it counts the other ranks' parts "
          "of the shared gradient segment too, PSS divides shared pages among the ranks that "
          "map them; floor = params + grads + momentum + one batch; dataset = train + test "
          "held by each rank; pss/fl = ours_PSS / floor, pss/fl+d = ours_PSS / (floor + "
          "dataset)")


if __name__ == "__main__":
    main()
