"""ddp-worker's failure behaviour and its outputs:
  - killing one rank (a middle one, and rank 0, which also serves the store) makes every
    other rank exit 6 with "peer ... lost" within the timeout; a stopped (silent) rank makes
    them exit 6 within the timeout too;
  - bad input is a distinct exit code with a message naming the file or flag: missing data
    file and bad IDX magic (3), model width not matching the data, unknown flag, bad value
    (2); MASTER_PORT already taken on rank 0 (5); a checkpoint dir that cannot be made (7);
  - rank 0 prints the epoch line in the documented form, writes the JSON metrics line to
    DDP_METRICS_FD (JSON also when the run diverges: a NaN loss is null), and touches
    DDP_HEARTBEAT_FILE.
"""
import gzip
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

from worker_util import WORKER, Checks, Ranks, tempdir

TIMEOUT_S = 8


def single(args, env=None, timeout=60, pass_fds=()):
    e = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_CHECKPOINT_DIR"):
        e.pop(k, None)
    e["OMP_NUM_THREADS"] = "1"
    if env:
        e.update(env)
    p = subprocess.run([WORKER] + args, env=e, capture_output=True, timeout=timeout,
                       pass_fds=pass_fds)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def peer_lost(c, work, victim, sig=signal.SIGKILL):
    hb = os.path.join(work, "v%d-%d-hb{rank}" % (victim, sig))
    args = ["--model", "mlp:64-256-256-8", "--data", "synthetic:20000:64:8", "--epochs", "50",
            "--batch-size", "16", "--timeout", str(TIMEOUT_S)]
    with Ranks(work, 3, args, env=lambda r: {"DDP_HEARTBEAT_FILE": hb.replace("{rank}",
                                                                               str(r))},
               tag="lost%d-%d" % (victim, sig)) as rk:
        # Training has started once every rank touched its heartbeat file.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(os.path.exists(hb.replace("{rank}", str(r))) for r in range(3)):
                break
            if any(p.poll() is not None for p in rk.procs):
                break
            time.sleep(0.02)
        c.check("lost: all 3 ranks training", all(p.poll() is None for p in rk.procs),
                rk.logs())
        os.kill(rk.procs[victim].pid, sig)
        t0 = time.monotonic()
        codes = []
        others = [r for r in range(3) if r != victim]
        for r in others:
            try:
                codes.append(rk.procs[r].wait(timeout=TIMEOUT_S + 20))
            except subprocess.TimeoutExpired:
                codes.append(None)
        took = time.monotonic() - t0
        c.check("lost: rank %d got signal %d, ranks %s exit 6 (%s) in %.1f s (timeout %d s)" %
                (victim, sig, others, codes, took, TIMEOUT_S),
                codes == [6, 6] and took < TIMEOUT_S + 5, rk.logs())
        if sig != signal.SIGKILL:
            return  # a silent peer: exit 6 within the timeout is what counts
        for r in others:
            e = rk.err(r)
            c.check("lost: rank %d says 'peer ... lost'" % r,
                    re.search(r"peer .*lost", e) is not None, e[-800:])


def bad_input(c, work):
    code, _, err = single(["--data", "idx:%s/nope.gz,%s/nope2.gz" % (work, work)])
    c.check("missing data file: exit 3 naming it (%d)" % code,
            code == 3 and "nope.gz" in err, err[-400:])
    bad = os.path.join(work, "bad-idx.gz")
    with gzip.open(bad, "wb") as f:
        f.write(b"\x00\x00\x0d\x03" + b"\x00" * 64)
    lab = os.path.join(work, "lab.idx")
    with open(lab, "wb") as f:
        f.write(b"\x00\x00\x08\x01\x00\x00\x00\x01\x00")
    code, _, err = single(["--data", "idx:%s,%s" % (bad, lab)])
    c.check("bad IDX magic: exit 3 naming the file (%d)" % code,
            code == 3 and "bad-idx.gz" in err and "magic" in err, err[-400:])
    code, _, err = single(["--model", "mlp:100-10", "--data", "synthetic:100:20:10"])
    c.check("model width vs data: exit 2 naming --model (%d)" % code,
            code == 2 and "--model" in err and "20 features" in err, err[-400:])
    code, _, err = single(["--model", "mlp:20-7", "--data", "synthetic:100:20:10"])
    c.check("model outputs vs classes: exit 2 naming --model (%d)" % code,
            code == 2 and "--model" in err and "10 classes" in err, err[-400:])
    code, _, err = single(["--frobnicate"])
    c.check("unknown flag: exit 2 naming it (%d)" % code, code == 2 and "--frobnicate" in err)
    code, _, err = single(["--epochs", "ten"])
    c.check("bad value: exit 2 naming the flag (%d)" % code, code == 2 and "--epochs" in err)
    code, _, err = single(["--lr-scale", "cubic"])
    c.check("bad --lr-scale: exit 2 (%d)" % code, code == 2 and "--lr-scale" in err)
    blocker = os.path.join(work, "a-file")
    with open(blocker, "w") as f:
        f.write("x")
    code, _, err = single(["--model", "mlp:8-4", "--data", "synthetic:64:8:4", "--epochs", "1",
                           "--checkpoint-dir", os.path.join(blocker, "ckpt")])
    c.check("checkpoint dir not writable: exit 7 naming it (%d)" % code,
            code == 7 and "a-file" in err, err[-400:])
    code, _, err = single(["--data", "mnist"])
    c.check("unknown data set: exit 2 naming --data (%d)" % code, code == 2 and "--data" in err)
    small = ["--model", "mlp:8-4", "--data", "synthetic:64:8:4", "--epochs", "1"]
    code, _, err = single(small + ["--clip-grad-norm", "1"])
    c.check("a flag the model ignores: exit 2 naming it (%d)" % code,
            code == 2 and "--clip-grad-norm" in err and "gpt" in err, err[-400:])
    code, out, err = single(small + ["--dump-params", os.path.join(work, "no", "p.bin")])
    c.check("--dump-params into a missing folder: exit 2 before training (%d)" % code,
            code == 2 and "--dump-params" in err and "epoch 1" not in out, err[-400:])
    code, _, err = single(small + ["--no-overlap=1"])
    c.check("a flag without value given one: exit 2 saying so (%d)" % code,
            code == 2 and "--no-overlap takes no value" in err, err[-400:])
    # 784 pixels per image, but 14x56: the CNN's 28x28 convolutions would read nonsense
    wide, wlab = os.path.join(work, "wide-idx"), os.path.join(work, "wide-lab")
    with open(wide, "wb") as f:
        f.write(b"\x00\x00\x08\x03" + struct.pack(">III", 4, 14, 56) + bytes(4 * 784))
    with open(wlab, "wb") as f:
        f.write(b"\x00\x00\x08\x01" + struct.pack(">I", 4) + bytes([0, 1, 2, 3]))
    code, _, err = single(["--model", "cnn:c4k3-p2-f10", "--data", "idx:%s,%s" % (wide, wlab)])
    c.check("IDX images of 784 pixels but 14x56 for the CNN: exit 2 naming both (%d)" % code,
            code == 2 and "--model" in err and "28x28" in err and "14x56" in err, err[-400:])
    # flags the run would ignore: exit 2 naming them, however many flags came before
    for args, flag in ((small + ["--min-unit-params", "100000"], "--min-unit-params"),
                       (small + ["--sharding", "full", "--bucket-cap-mb", "1"], "--bucket-cap-mb"),
                       (["--model", "gpt:1-1-8-8", "--data", "fortunes", "--optimizer", "adamw"] +
                        ["--eps", "1e-8"] * 9 + ["--momentum", "0.5"], "--momentum")):
        code, _, err = single(args)
        c.check("%s where the run ignores it: exit 2 naming it (%d)" % (flag, code),
                code == 2 and flag in err and "would ignore it" in err, err[-400:])
    code, _, err = single(["--data", "idx:a,b,c,d,e"])
    c.check("idx: with five files: exit 2 naming --data (%d)" % code,
            code == 2 and "idx:a,b,c,d,e" in err, err[-400:])
    code, _, err = single(["--model", "mlp:16-1048576-2", "--data", "synthetic:100:16:2",
                           "--batch-size", "65536"])
    c.check("activations past the machine's memory: exit 2 naming --model (%d)" % code,
            code == 2 and "--model" in err and "GiB" in err, err[-400:])
    code, _, err = single(["--data", "fortunes"])
    c.check("a text corpus for the MLP: exit 2 saying it needs a gpt (%d)" % code,
            code == 2 and "gpt:" in err, err[-400:])
    # one rank's --dump-params folder missing ({rank}: d0 is there, d1 is not): both ranks
    # exit 2 together, none exits 6 blaming the other
    os.makedirs(os.path.join(work, "d0"), exist_ok=True)
    with Ranks(work, 2, small + ["--dump-params", os.path.join(work, "d{rank}", "p.bin"),
                                 "--timeout", "20"], tag="outpath") as rk:
        codes = rk.wait(60)
        c.check("one rank cannot write its --dump-params: every rank exits 2 (%s)" % codes,
                codes == [2, 2] and "d1" in rk.err(1) and "another rank" in rk.err(0),
                rk.logs())
    # --max-steps on an epoch's last step (64 samples / 32 = 2 steps an epoch): that epoch's
    # report and checkpoint, as without the flag, and no step more
    ck = os.path.join(work, "maxck")
    code, out, err = single(small + ["--epochs", "3", "--max-steps", "2", "--batch-size", "32",
                                     "--checkpoint-dir", ck])
    c.check("--max-steps at an epoch's end: its report and checkpoint (%d)" % code,
            code == 0 and "epoch 1/3" in out and "epoch 2/3" not in out and
            os.path.exists(os.path.join(ck, "ckpt-000001.bin")), out + err[-400:])
    code, _, err = single(["--model", "mlp:8-4", "--data", "synthetic:640:8:4", "--epochs", "1",
                           "--notice-at-step", "2", "--checkpoint-dir", ""])
    c.check("a notice without a checkpoint folder: exit 10 not promising a resume (%d)" % code,
            code == 10 and "no checkpoint folder here" in err and "resume continues" not in err,
            err[-400:])
    code, _, err = single(small + ["--epochs", "3", "--max-steps", "3", "--notice-at-step", "3"])
    c.check("a notice at --max-steps: the run is done, exit 0 (%d)" % code, code == 0,
            err[-400:])


def port_in_use(c, work):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with Ranks(work, 2, ["--model", "mlp:8-4", "--data", "synthetic:64:8:4",
                             "--timeout", "5"], port=port, tag="port") as rk:
            rk.procs[1].kill()
            codes = rk.wait(60)
            e = rk.err(0)
            c.check("port in use: rank 0 exits 5 naming the port (%s)" % codes[0],
                    codes[0] == 5 and str(port) in e, e[-500:])


def outputs(c, work):
    r, w = os.pipe()
    hb = os.path.join(work, "heartbeat")
    try:
        code, out, err = single(["--model", "mlp:16-32-4", "--data", "synthetic:2000:16:4",
                                 "--epochs", "3"],
                                env={"DDP_METRICS_FD": str(w), "DDP_HEARTBEAT_FILE": hb,
                                     "DDP_GENERATION": "2"},
                                pass_fds=(w,))
    finally:
        os.close(w)
    with os.fdopen(r) as f:
        metrics = f.read()
    c.check("single process: exit 0 (%d)" % code, code == 0, err[-500:])
    lines = [l for l in out.splitlines() if l.startswith("epoch")]
    pat = re.compile(r"^epoch \d+/3 \| loss \d+\.\d{4} \| test acc \d\.\d{4} \| "
                     r"\d{1,3}(,\d{3})* samples/s$")
    c.check("epoch lines in the documented form (%s)" % lines[:1],
            len(lines) == 3 and all(pat.match(l) for l in lines))
    objs = [json.loads(l) for l in metrics.splitlines()]
    keys = {"epoch", "epochs", "loss", "test_acc", "samples_per_s", "lr", "world_size",
            "generation", "time_s"}
    c.check("3 metrics lines with the documented keys",
            len(objs) == 3 and all(set(o) == keys for o in objs) and
            objs[2]["epoch"] == 3 and objs[0]["generation"] == 2 and
            objs[0]["world_size"] == 1, metrics)
    c.check("metrics match the printed line",
            bool(objs) and ("loss %.4f" % objs[0]["loss"]) in lines[0])
    c.check("heartbeat file touched", os.path.exists(hb))
    # a diverging run (lr 1000: the loss goes to NaN): every metrics line is still JSON,
    # the values that are not finite null
    r, w = os.pipe()
    try:
        code, out, err = single(["--model", "mlp:16-32-4", "--data", "synthetic:2000:16:4",
                                 "--epochs", "2", "--lr", "1000"],
                                env={"DDP_METRICS_FD": str(w)}, pass_fds=(w,))
    finally:
        os.close(w)
    with os.fdopen(r) as f:
        metrics = f.read()
    try:
        objs = [json.loads(l) for l in metrics.splitlines()]
    except ValueError:
        objs = None
    c.check("diverged: exit 0, 2 metrics lines that parse as JSON (%s)" % metrics[:200],
            code == 0 and objs is not None and len(objs) == 2, err[-500:])
    c.check("diverged: the loss is null, said once on stderr",
            bool(objs) and objs[-1]["loss"] is None and
            err.count("reported as null") == 1, err[-500:])


def main():
    c = Checks("worker_failure")
    work = tempdir("ddp-fail-")
    try:
        bad_input(c, work)
        outputs(c, work)
        port_in_use(c, work)
        peer_lost(c, work, 1)
        peer_lost(c, work, 0)
        peer_lost(c, work, 2, signal.SIGSTOP)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
