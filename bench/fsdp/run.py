#!/usr/bin/python3
"""bench/fsdp: peak memory per rank of ddp-worker's sharding strategies against the ZeRO
paper's formula, at W = 1, 2 and 4 on this host.

    bench/fsdp/run.py [BUILD_DIR]    (default build)

The model: gpt:6-4-384-64 (10.8 M parameters) with AdamW (2 state arrays), batch 2 windows,
5 steps on a text made here. Per rank, float32, the formula for parameters, gradients and
optimizer state (Rajbhandari et al., ZeRO, section 5), P parameters, K = 2, plus the units
in flight (trainer/fsdp.h: F = the floats of unit 0 and of the blocks whole at once):
  none       4P + 4P + 4KP
  optimizer  4P + 4P + 4KP/W           (stage 1: the state sharded)
  grad       4P + (4P + 4KP)/W + 4F    (stage 2: gradients too; F = unit 0 + 3 blocks of
                                        gradients: the one written, two being scattered)
  full       (4P + 4P + 4KP)/W + 4F    (stage 3: parameters too; F = 2 x unit 0 + 2 blocks
                                        of parameters (current, prefetched) + 3 of gradients)
Then speed at W = 2: ddp-worker --sharding none and optimizer against PyTorch DDP and DDP
with ZeroRedundancyOptimizer (AdamW, bench/models/torch_models.py --zero) on gpt:4-4-128-64,
tokens/s, median of 3 paired runs (bench/models/side_by_side.py's runners); and the step
time of grad and full (with and without the overlap) against none, with the share of their
gathers' and scatters' time the overlap hides: 1 - exposed / exposed_no_overlap, exposed =
the time rank 0's training thread waits for them (its --trace: each `wait` to the
`ag_done`/`rs_done` after it, steps 2 on), which without the overlap is their whole time.
measured: peak proportional set size of each rank (/proc/PID/smaps_rollup every 20 ms, max
over the ranks), minus the same run's baseline (the process before the model: a 1-step
run of a 1-parameter-scale model, gpt:1-1-4-64, the same data) and minus the activations
(ddp-worker's own arena for this batch). ratio = measured / formula.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
spec = importlib.util.spec_from_file_location("sbs", os.path.join(REPO, "bench", "peers",
                                                                  "ddp_side_by_side.py"))
sbs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sbs)

MODEL = "gpt:6-4-384-64"
TINY = "gpt:1-1-4-64"
BATCH = 2


def nparams(model):
    L, H, D, T = (int(v) for v in model[4:].split("-"))
    return 256 * D + T * D + L * (12 * D * D + 13 * D) + 2 * D


def formula(model, strategy, w):
    """ZeRO's per-rank bytes for the strategy, plus the units in flight (see above)."""
    L, H, D, T = (int(v) for v in model[4:].split("-"))
    P, K = nparams(model), 2
    unit0, block = (256 + T) * D, 12 * D * D + 13 * D
    if strategy == "none":
        return 4 * P + 4 * P + 4 * K * P
    if strategy == "optimizer":
        return 4 * P + 4 * P + 4 * K * P / w
    if strategy == "grad":
        return 4 * P + (4 * P + 4 * K * P) / w + 4 * (unit0 + 3 * block)
    return (4 * P + 4 * P + 4 * K * P) / w + 4 * (2 * unit0 + 5 * block)


def activations(model):
    L, H, D, T = (int(v) for v in model[4:].split("-"))
    n = BATCH * T
    block = n * (16 * D + 4) + BATCH * H * T * T
    return 4 * (n * D + L * block + n * (D + 2) + n * 256 + n * 9 * D + T * T)


def run(worker, model, w, sharding, text, steps):
    port = sbs.free_port()
    procs = []
    for r in range(w):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(w), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(w),
                   GROUP_RANK="0", GROUP_WORLD_SIZE="1", OMP_NUM_THREADS="1",
                   DDP_LOG_LEVEL="warn")
        procs.append(subprocess.Popen(
            [worker, "--model", model, "--backend", "cpu", "--data", "text:%s,%s" % (text, text),
             "--optimizer", "adamw", "--batch-size", str(BATCH), "--max-steps", str(steps),
             "--sharding", sharding, "--checkpoint-dir", "", "--lr-scale", "none"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env))
    peak = {p.pid: 0 for p in procs}
    deadline = time.monotonic() + 600
    while any(p.poll() is None for p in procs):
        for p in procs:
            peak[p.pid] = max(peak[p.pid], sbs.pss_kib(p.pid))
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise SystemExit("%s W=%d %s: no end after 600 s" % (model, w, sharding))
        time.sleep(0.02)
    for p in procs:
        if p.returncode != 0:
            raise SystemExit("%s W=%d %s failed: %s" % (model, w, sharding,
                                                         p.stderr.read().decode()[-800:]))
    return max(peak.values()) * 1024


def models_runners():
    """bench/models/side_by_side.py: the paired runners of ddp-worker and PyTorch."""
    spec2 = importlib.util.spec_from_file_location(
        "models_sbs", os.path.join(REPO, "bench", "models", "side_by_side.py"))
    m = importlib.util.module_from_spec(spec2)
    spec2.loader.exec_module(m)
    return m


def speed_texts(d):
    """The speed runs' training text (and its .valid) in d; returns its path."""
    text = os.path.join(d, "text")
    with open(text, "wb") as f:
        f.write(bytes((i * 7 + i // 13) % 96 + 32 for i in range(200000)))
    with open(text + ".valid", "wb") as f:
        f.write(bytes((i * 5 + i // 7) % 96 + 32 for i in range(8000)))
    return text


def speed(worker):
    m = models_runners()
    import statistics
    with tempfile.TemporaryDirectory(prefix="ddp-fsdp-speed-") as d:
        text = speed_texts(d)
        runs = {"ours none": [], "ours optimizer": [], "torch ddp": [], "torch zero": []}
        for _ in range(3):
            runs["ours none"].append(m.run_ours(worker, m.GPT, 2, text, d)[0])
            runs["torch ddp"].append(m.run_torch(m.GPT, 2, text)[0])
            runs["ours optimizer"].append(m.run_ours(worker, m.GPT, 2, text, d,
                                                     sharding="optimizer")[0])
            runs["torch zero"].append(m.run_torch(m.GPT, 2, text, zero=True)[0])
    med = {k: statistics.median(v) for k, v in runs.items()}
    print("# speed, %s W=2, tokens/s, median of 3" % m.GPT)
    for k in ("ours none", "ours optimizer", "torch ddp", "torch zero"):
        print("%-16s %10.0f   (%s)" % (k, med[k], " ".join("%.0f" % v for v in runs[k])))
    print("ours optimizer / torch zero: %.2fx (paired median %.2fx); ours optimizer / ours "
          "none: %.2fx" % (med["ours optimizer"] / med["torch zero"],
                           statistics.median(a / b for a, b in zip(runs["ours optimizer"],
                                                                   runs["torch zero"])),
                           med["ours optimizer"] / med["ours none"]))


def exposed_s(trace_path):
    """Seconds rank 0's training thread waited for gathers and scatters, steps 2 on."""
    total, since = 0.0, None
    with open(trace_path) as f:
        for line in f:
            t, step, kind, _ = line.split()
            if int(step) < 2:
                continue
            if kind == "wait":
                since = int(t)
            elif kind in ("ag_done", "rs_done") and since is not None:
                total += (int(t) - since) / 1e9
                since = None
    return total


def fsdp_speed(worker):
    m = models_runners()
    import statistics
    # "2 units": --min-unit-params groups the 4 blocks (and the embeddings) into 2 units
    grouped = ["--min-unit-params", "400000"]
    kinds = (("none", "none", True, []), ("grad", "grad", True, []),
             ("grad no-overlap", "grad", False, []), ("full", "full", True, []),
             ("full no-overlap", "full", False, []), ("full 2 units", "full", True, grouped),
             ("full 2 units no-overlap", "full", False, grouped))
    with tempfile.TemporaryDirectory(prefix="ddp-fsdp-step-") as d:
        text = speed_texts(d)
        runs = {k: [] for k, _, _, _ in kinds}
        waits = {k: [] for k, _, _, _ in kinds}
        for _ in range(3):
            for k, s, ov, extra in kinds:
                tr = os.path.join(d, "trace")
                runs[k].append(m.run_ours(worker, m.GPT, 2, text, d, sharding=s, overlap=ov,
                                          trace=tr, extra_args=extra)[0])
                waits[k].append(exposed_s(tr + ".0"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    wmed = {k: statistics.median(v) for k, v in waits.items()}
    print("# step time, %s W=2, relative to none (tokens/s none / tokens/s), median of 3"
          % m.GPT)
    for k, _, _, _ in kinds:
        print("%-24s %10.0f tokens/s  step %.2fx   (%s)" % (
            k, med[k], med["none"] / med[k], " ".join("%.0f" % v for v in runs[k])))
    for s in ("grad", "full", "full 2 units"):
        ov, no = wmed[s], wmed[s + " no-overlap"]
        print("%s: waits for gathers and scatters %.3f s with the overlap, %.3f s without: "
              "%.0f%% hidden" % (s, ov, no, 100 * (1 - ov / no) if no > 0 else float("nan")))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build")
    worker = os.path.join(build, "bin", "ddp-worker")
    # the same OpenBLAS kernels for PyTorch as ddp-worker picks (trainer/blas_core.h)
    os.environ.setdefault("OPENBLAS_CORETYPE",
                          subprocess.check_output([worker, "--blas-core"], text=True).strip())
    P = nparams(MODEL)
    acts = activations(MODEL)
    with tempfile.TemporaryDirectory(prefix="ddp-fsdp-") as d:
        text = os.path.join(d, "text")
        with open(text, "wb") as f:
            f.write(bytes((i * 7 + i // 13) % 96 + 32 for i in range(64 * 400)))
        print("# %s: %.1f M parameters, AdamW; activations %.1f MiB; MiB per rank" %
              (MODEL, P / 1e6, acts / 2**20))
        print("%-10s %2s %10s %10s %10s %8s" % ("sharding", "W", "pss_MiB", "model_MiB",
                                                  "formula", "ratio"))
        for w in (1, 2, 4):
            base = run(worker, TINY, w, "none", text, 1)
            for s in ("none", "optimizer", "grad", "full"):
                if w == 1 and s != "none":
                    continue
                pss = run(worker, MODEL, w, s, text, 5)
                model_bytes = pss - base - acts
                f = formula(MODEL, s, w)
                print("%-10s %2d %10.1f %10.1f %10.1f %7.2fx" % (
                    s, w, pss / 2**20, model_bytes / 2**20, f / 2**20, model_bytes / f))
    speed(worker)
    fsdp_speed(worker)
    print("# pss = peak PSS of the largest rank; model = pss - baseline (%s, same W) - "
          "activations; formula = ZeRO's per-rank bytes; %d cores, load %s" % (
              TINY, os.cpu_count(), open("/proc/loadavg").read()[:14]))


if __name__ == "__main__":
    main()
