#!/usr/bin/python3
"""side_by_side.py - ddp-worker's CNN and GPT against the same models in PyTorch DDP
(torch_models.py): throughput at W = 1 and 2 ranks on this host, one thread per rank, the
same BLAS, median of --reps paired runs (ours, then theirs, alternating), peak memory per rank
against the floor, and for the GPT at W = 2 how much of the communication the overlap hides
(bench/ddp/trace_stats.py on ddp-worker's --trace: hidden = 1 - exposed(overlap on) /
comm(overlap off)). Called by bench/models/run.sh.

    side_by_side.py --worker BUILD/bin/ddp-worker --text FILE [--reps 3]

Rows:
  cnn  cnn:c32k5-p2-c64k5-p2-f1024-f10 (the default CNN), batch 32/rank, SGD momentum 0.9,
       synthetic 1x28x28 data, 60 steps per rank; samples/s
  gpt  gpt:4-4-128-64, batch 16 windows/rank, AdamW lr 3e-3, clip 1.0, 40 steps per rank
       of FILE's windows; tokens/s
Floor = parameters + gradients + optimizer state (SGD 1, AdamW 2 arrays) + the activations
the backward needs (ddp-worker's own arena: trainer/model_cnn.c, model_gpt.c), float32.
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
TRACE_STATS = os.path.join(HERE, "..", "ddp", "trace_stats.py")
CNN = "cnn:c32k5-p2-c64k5-p2-f1024-f10"
GPT = "gpt:4-4-128-64"
CNN_B, CNN_STEPS = 32, 60
GPT_B, GPT_STEPS = 16, 40


def cnn_floor():
    params = 832 + 51264 + 3136 * 1024 + 1024 + 10250
    # per sample: conv1 out 32x28x28, pool 32x14x14 (+ argmax), conv2 64x14x14, pool 64x7x7
    # (+ argmax), fc 1024, fc 10; the im2col buffer (the largest conv's) and two gradient
    # buffers of the largest output
    per = 32 * 784 + 2 * 32 * 196 + 64 * 196 + 2 * 64 * 49 + 1024 + 10
    acts = CNN_B * per + 32 * 25 * 196 * 1 + 2 * CNN_B * 32 * 784
    return 4 * (3 * params + acts)


def gpt_floor():
    L, H, D, T = (int(v) for v in GPT[4:].split("-"))
    params = 256 * D + T * D + L * (12 * D * D + 13 * D) + 2 * D
    n = GPT_B * T
    block = n * (16 * D + 4) + GPT_B * H * T * T
    acts = n * D + L * block + n * (D + 2) + n * 256 + n * 9 * D + T * T
    return 4 * (4 * params + acts)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ours(worker, model, w, text, work, trace=None, overlap=True, sharding="none",
             extra_args=()):
    port = free_port()
    if model.startswith("cnn:"):
        n = w * CNN_B * CNN_STEPS
        args = ["--data", "synthetic:%d:784:10" % n, "--batch-size", str(CNN_B), "--epochs", "1"]
    else:
        args = ["--data", "text:%s,%s" % (text, text + ".valid"), "--batch-size", str(GPT_B),
                "--epochs", "1", "--max-steps", str(GPT_STEPS), "--optimizer", "adamw",
                "--lr", "0.003", "--lr-scale", "none", "--clip-grad-norm", "1.0",
                "--lr-schedule", "constant"]
    procs = []
    for r in range(w):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(w), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(w),
                   GROUP_RANK="0", GROUP_WORLD_SIZE="1", OMP_NUM_THREADS="1",
                   DDP_LOG_LEVEL="warn")
        extra = (["--trace", trace + ".{rank}"] if trace else []) + list(extra_args)
        if not overlap:
            extra.append("--no-overlap")
        out = open(os.path.join(work, "out%d" % r), "w")
        # buckets only where the gradients are all-reduced: sharding by units (grad, full,
        # hybrid) reduce-scatters each unit, and ddp-worker refuses the flag there
        buckets = ["--bucket-cap-mb", "25"] if sharding in ("none", "optimizer") else []
        procs.append(subprocess.Popen(
            [worker, "--model", model, "--backend", "cpu", "--checkpoint-dir", "",
             "--sharding", sharding] + buckets + args + extra, stdout=out,
            stderr=subprocess.STDOUT, env=env))
        out.close()
    rss = []
    deadline = time.monotonic() + 900
    for p in procs:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                for q in procs:
                    q.kill()
                raise SystemExit("ddp-worker %s W=%d: no end after 900 s" % (model, w))
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss.append(ru.ru_maxrss)
    text_out = open(os.path.join(work, "out0")).read()
    if any(p.returncode != 0 for p in procs):
        raise SystemExit("ddp-worker %s W=%d failed:\n%s" % (model, w, text_out[-2000:]))
    unit = "samples" if model.startswith("cnn:") else "tokens"
    m = re.findall(r"([0-9,]+) %s/s" % unit, text_out)
    if not m:
        raise SystemExit("ddp-worker printed no %s/s:\n%s" % (unit, text_out[-2000:]))
    return float(m[-1].replace(",", "")), max(rss)


def run_torch(model, w, text, zero=False):
    b, steps = (CNN_B, CNN_STEPS) if model.startswith("cnn:") else (GPT_B, GPT_STEPS)
    p = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_models.py"), "--world",
                        str(w), "--model", model, "--steps", str(steps), "--batch-size", str(b),
                        "--text", text] + (["--zero"] if zero else []),
                       capture_output=True, text=True, timeout=900)
    m = re.search(r"RESULT per_s=([0-9.]+) peak_rss_kib=([0-9,]+)", p.stdout)
    if p.returncode != 0 or not m:
        raise SystemExit("torch_models.py %s W=%d failed (%d):\n%s" % (
            model, w, p.returncode, (p.stdout + p.stderr)[-2000:]))
    return float(m.group(1)), max(int(v) for v in m.group(2).split(","))


def hidden(worker, text, work):
    figs = {}
    for ov in (True, False):
        tr = os.path.join(work, "trace-%d" % ov)
        run_ours(worker, GPT, 2, text, work, trace=tr, overlap=ov)
        out = subprocess.run([sys.executable, TRACE_STATS, tr + ".0", tr + ".1"],
                             capture_output=True, text=True, check=True).stdout.split()
        figs[ov] = [float(v) for v in out]
    comm_off, exposed_on = figs[False][0], figs[True][1]
    comm_sf_off, exposed_sf_on = figs[False][2], figs[True][3]
    return (comm_off, exposed_on, 1 - exposed_on / comm_off if comm_off > 0 else 0.0,
            1 - exposed_sf_on / comm_sf_off if comm_sf_off > 0 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worlds", default="1,2")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddp-models-") as work:
        for model, floor, unit in ((CNN, cnn_floor(), "samples/s"), (GPT, gpt_floor(),
                                                                     "tokens/s")):
            for w in (int(v) for v in args.worlds.split(",")):
                ours, theirs = [], []
                for _ in range(args.reps):
                    ours.append(run_ours(args.worker, model, w, args.text, work))
                    theirs.append(run_torch(model, w, args.text))
                ratio = statistics.median(o[0] / t[0] for o, t in zip(ours, theirs))
                rows.append((model, unit, w, statistics.median(v[0] for v in ours),
                             statistics.median(v[0] for v in theirs), ratio,
                             statistics.median(v[1] for v in ours) / 1024,
                             statistics.median(v[1] for v in theirs) / 1024, floor / 2**20))
                print("# %s W=%d: ours %s; torch %s" % (
                    model, w, " ".join("%.0f" % v[0] for v in ours),
                    " ".join("%.0f" % v[0] for v in theirs)), file=sys.stderr)
        hid = hidden(args.worker, args.text, work) if "2" in args.worlds.split(",") else None
    print("# ddp-worker vs PyTorch DDP (gloo), 1 thread/rank, median of %d paired runs"
          % args.reps)
    print("%-34s %-10s %2s %10s %10s %7s %9s %9s %8s %7s" % (
        "model", "unit", "W", "ours", "torch", "ratio", "ours_MiB", "torch_MiB", "floor",
        "rss/fl"))
    for model, unit, w, o, t, ratio, orss, trss, fl in rows:
        print("%-34s %-10s %2d %10.0f %10.0f %6.2fx %9.0f %9.0f %8.1f %6.2fx" % (
            model, unit, w, o, t, ratio, orss, trss, fl, orss / fl))
    if hid:
        print("# %s W=2: comm %.2f ms/step without overlap, exposed %.2f ms with it: %.0f%% "
              "hidden (skew-free %.0f%%)" % (GPT, hid[0], hid[1], 100 * hid[2], 100 * hid[3]))
    print("# ratio = median over the runs of ours / torch of the run beside it (> 1: ours "
          "faster); *_MiB = peak RSS per rank (max over ranks, ru_maxrss: RSS counts shared "
          "pages, the Python interpreter and torch's libraries for torch); floor = params + "
          "grads + optimizer state + activations (float32); rss/fl = ours_MiB / floor")
    print("# %d cores, load average %s" % (os.cpu_count(), open("/proc/loadavg").read()[:14]))


if __name__ == "__main__":
    main()
