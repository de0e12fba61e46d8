"""The GPT in ddp-worker, as test_worker_cnn.py checks the CNN: with the same seed, W = 2 and
W = 4 ranks with batch B each give after 20 steps the same parameters (relative 1e-5) as 1
process with batch W*B, with AdamW, gradient clipping and the warmup-cosine schedule, with
SGD, and with AdamW and --dropout 0.1 (a sample's mask is its own, wherever it is trained);
every rank bit-identical; a 1-process run with batch B far off, and dropout's run far from
the same run without. Checkpoints: 1 epoch with dropout, then a resumed run to 2 epochs,
ends bit-identical to 2 epochs straight (AdamW's moments and step count restored, and the
masks, which are a function of the seed and the step); an SGD run skips the AdamW checkpoints naming both. The
reports: --eval-every lines with the validation loss, --generate's bytes, exit 2 for a bad
spec or a corpus too short, naming the flag or the file.
"""
import json
import os
import re
import random
import shutil
import subprocess

from worker_util import (WORKER, Checks, check_equivalence, Ranks, read_floats, rel_diff, run_ok,
                         tempdir)

B = 4
STEPS = 20
MODEL = "gpt:2-4-32-32"


def corpus(path, nbytes, seed):
    """Sentences from a small vocabulary: text with structure to learn, made here."""
    rnd = random.Random(seed)
    words = ("the of a cat dog runs sleeps under over quick lazy brown red tree house "
             "and then never always small big moon sun").split()
    out = []
    size = 0
    while size < nbytes:
        s = " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 9))).capitalize() + ".\n"
        out.append(s)
        size += len(s)
    with open(path, "w") as f:
        f.write("".join(out)[:nbytes])


def common(work, opt):
    base = ["--model", MODEL, "--data", "text:%s/train.txt,%s/valid.txt" % (work, work),
            "--seed", "7", "--lr-scale", "none", "--timeout", "30", "--backend", "cpu"]
    if opt == "adamw":
        return base + ["--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.1",
                       "--clip-grad-norm", "0.5", "--warmup-steps", "5"]
    return base + ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]


def equivalence(c, work, opt, drop=None):
    args = common(work, opt) + (["--dropout", drop] if drop else [])
    check_equivalence(c, work, args, B, STEPS, ("0.01", "25"),
                      name=opt + ("-dropout" if drop else ""))


def dropout_acts(c, work):
    mx, _ = rel_diff(read_floats(work + "/adamw-dropout-ref2.bin"),
                     read_floats(work + "/adamw-ref2.bin"))
    c.check("--dropout 0.1 trains otherwise than no dropout (max rel %.2e)" % mx, mx > 1e-3)


def resume(c, work):
    args = common(work, "adamw") + ["--batch-size", "16", "--dropout", "0.1"]
    straight, resumed = work + "/straight", work + "/resumed"
    run_ok(work, 2, args + ["--epochs", "2", "--dump-params", work + "/straight.bin"],
           ckpt_dirs=[straight], tag="straight")
    # The schedule spans the run's steps (--epochs 2), so the first run is the same job
    # stopped after its first epoch's checkpoint, as a node loss would stop it.
    with Ranks(work, 2, args + ["--epochs", "2", "--kill-after-epoch", "1"],
               ckpt_dirs=[resumed], tag="first") as rk:
        codes = rk.wait(120)
    c.check("the first run was killed after epoch 1 (%s)" % codes, all(x == -9 for x in codes))
    _, errs = run_ok(work, 2, args + ["--epochs", "2", "--dump-params", work + "/resumed.bin"],
                     ckpt_dirs=[resumed], tag="resumed")
    c.check("the second run resumed after epoch 1", "resuming after epoch 1" in errs[0])
    c.check("resumed == straight, bit for bit (AdamW state restored)",
            read_floats(work + "/resumed.bin") == read_floats(work + "/straight.bin"))
    # resumed at another world size (2 -> 4 ranks: half the steps per epoch): the schedule
    # goes on where the epochs are, not at the old world's step count (which put the cosine
    # past its end: lr 0, AdamW standing still for the whole second epoch)
    grown = work + "/grown"
    with Ranks(work, 2, args + ["--epochs", "2", "--kill-after-epoch", "1"],
               ckpt_dirs=[grown], tag="grown-first") as rk:
        rk.wait(120)
    outs, errs = run_ok(work, 4, args + ["--epochs", "2", "--eval-every", "3"],
                        ckpt_dirs=[grown], tag="grown")
    c.check("the grown run resumed after epoch 1", "resuming after epoch 1" in errs[0],
            errs[0][-600:])
    lrs = [float(m) for m in re.findall(r"^epoch 2/2 .*\| lr (\S+)$", outs[0], re.M)]
    c.check("at 4 ranks the second epoch trains with lr > 0, falling (%s)" % lrs,
            len(lrs) >= 2 and all(x > 0 for x in lrs) and lrs == sorted(lrs, reverse=True),
            outs[0][-800:])
    _, errs = run_ok(work, 1, common(work, "sgd") + ["--batch-size", "16", "--epochs", "1"],
                     ckpt_dirs=[straight], tag="sgd")
    c.check("an SGD run skips the AdamW checkpoints naming both",
            "it is of model '%s adamw'" % MODEL in errs[0] and "not '%s sgd'" % MODEL in errs[0]
            and "no checkpoint found" in errs[0], errs[0][-600:])


def reports(c, work):
    outs, _ = run_ok(work, 2, common(work, "adamw") +
                     ["--batch-size", "16", "--epochs", "1", "--eval-every", "5",
                      "--generate", "80", "--checkpoint-dir", ""], tag="reports")
    lines = [l for l in outs[0].splitlines() if l.startswith("epoch ")]
    c.check("a report every 5 steps and at the end (%d lines)" % len(lines),
            len(lines) >= 3 and all("val loss" in l and "nats/byte" in l and "ppl" in l
                                    for l in lines), outs[0][-500:])
    c.check("rank 0 prints the generated bytes",
            "--- 80 generated bytes ---" in outs[0] and "--- end ---" in outs[0])
    c.check("rank 1 prints none", "generated" not in outs[1])
    # the metrics lines: between epochs a step report of the epoch under way (integer epoch =
    # epochs done, step/steps: what ddpctl watch's bar follows), at its end the epoch's own
    r, w = os.pipe()
    try:
        p = subprocess.run([WORKER] + common(work, "adamw") +
                           ["--batch-size", "16", "--epochs", "1", "--eval-every", "10",
                            "--checkpoint-dir", ""], capture_output=True, text=True,
                           timeout=120, pass_fds=(w,), env=dict(os.environ,
                                                                DDP_METRICS_FD=str(w)))
    finally:
        os.close(w)
    with os.fdopen(r) as f:
        objs = [json.loads(l) for l in f.read().splitlines()]
    mid, end = objs[:-1], objs[-1] if objs else {}
    c.check("%d step reports: integer epoch 0, step of steps, a fractional epoch_progress, "
            "val_loss" % len(mid), p.returncode == 0 and len(mid) >= 2 and all(
                o["epoch"] == 0 and 0 < o["step"] <= o["steps"] and 0 < o["epoch_progress"] < 1
                and "val_loss" in o and "global_step" in o for o in mid), str(objs)[:400])
    c.check("the epoch's report: epoch 1, no step, epoch_progress 1",
            end.get("epoch") == 1 and "step" not in end and end.get("epoch_progress") == 1.0
            and "val_loss" in end, str(end))
    for args, what, flag in ((["--model", "gpt:2-3-32-32"], "a width not a multiple of heads",
                              "--model"),
                             (["--model", MODEL, "--data", "text:%s/tiny.txt" % work],
                              "a corpus too short", "tiny.txt"),
                             (["--model", MODEL, "--data", "synthetic:10:784:10"],
                              "image data for a gpt", "--data"),
                             (["--model", "mlp:784-10", "--data", "synthetic:64:784:10",
                               "--dropout", "0.1"], "dropout for an mlp", "--dropout"),
                             (["--model", MODEL, "--dropout", "1"], "dropout 1", "--dropout")):
        p = subprocess.run([WORKER] + args + ["--checkpoint-dir", ""], capture_output=True,
                           text=True, timeout=60)
        c.check("%s: exit 2 or 3 naming %s (%d: %s)" % (what, flag, p.returncode,
                                                        p.stderr.strip()[-120:]),
                p.returncode in (2, 3) and flag in p.stderr)


def main():
    c = Checks("worker_gpt")
    work = tempdir("ddp-gpt-")
    try:
        corpus(work + "/train.txt", 24000, 1)
        corpus(work + "/valid.txt", 3000, 2)
        with open(work + "/tiny.txt", "w") as f:
            f.write("too short")
        equivalence(c, work, "adamw")
        equivalence(c, work, "sgd")
        equivalence(c, work, "adamw", "0.1")
        dropout_acts(c, work)
        resume(c, work)
        reports(c, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
