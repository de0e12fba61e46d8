"""The CNN in ddp-worker, as test_worker_equivalence.py and test_worker_resume.py check the
MLP: with the same seed, W = 2 and W = 4 ranks with batch B each give after 20 steps the
same parameters (relative 1e-5) as 1 process with batch W*B, with overlap on (many buckets)
and off (one bucket), every rank bit-identical, and a 1-process run with batch B far off;
the same with dropout layers in the spec (a sample's mask is its own, wherever it trains),
far from the run without them.
Then checkpoints: 1 epoch, then a resumed run to 2 epochs, ends bit-identical to 2 epochs
straight; an MLP run over the CNN's folder skips its checkpoints naming both models, and a
bad spec is exit 2 naming --model.
Convolutions: --conv im2col and --conv onednn (oneDNN, where the build has it; said when
not) give after 20 steps the same parameters to fp32 rounding (relative 1e-4), the job's log
names what each layer ran on, and a bad --conv, or --conv with a model without
convolutions, is exit 2 naming --conv.
"""
import os
import shutil
import subprocess

from worker_util import (WORKER, Checks, check_equivalence, read_floats, rel_diff, run_ok,
                         tempdir)

B = 8
STEPS = 20
MODEL = "cnn:c4k5-p2-c8k3-p2-f32-f10"
COMMON = ["--model", MODEL, "--data", "synthetic:1024:784:10", "--seed", "7",
          "--lr", "0.05", "--lr-scale", "none", "--momentum", "0.9", "--weight-decay", "0.001",
          "--timeout", "30", "--backend", "cpu"]


def equivalence(c, work):
    check_equivalence(c, work, COMMON, B, STEPS, ("0.0002", "25"))
    drop = ["--model", "cnn:c4k5-p2-d0.2-c8k3-p2-f32-d0.5-f10"] + COMMON[2:]
    check_equivalence(c, work, drop, B, STEPS, ("0.0002", "25"), name="dropout")
    mx, _ = rel_diff(read_floats(work + "/dropout-ref2.bin"), read_floats(work + "/ref2.bin"))
    c.check("dropout layers train otherwise than none (max rel %.2e)" % mx, mx > 1e-3)


def resume(c, work):
    args = COMMON + ["--batch-size", "32"]
    straight, resumed = work + "/straight", work + "/resumed"
    run_ok(work, 2, args + ["--epochs", "2", "--dump-params", work + "/straight.bin"],
           ckpt_dirs=[straight], tag="straight")
    run_ok(work, 2, args + ["--epochs", "1"], ckpt_dirs=[resumed], tag="first")
    _, errs = run_ok(work, 2, args + ["--epochs", "2", "--dump-params", work + "/resumed.bin"],
                     ckpt_dirs=[resumed], tag="resumed")
    c.check("the second run resumed after epoch 1", "resuming after epoch 1" in errs[0])
    c.check("resumed == straight, bit for bit",
            read_floats(work + "/resumed.bin") == read_floats(work + "/straight.bin"))
    _, errs = run_ok(work, 1, ["--model", "mlp:784-16-10"] + COMMON[2:] +
                     ["--batch-size", "32", "--epochs", "1"], ckpt_dirs=[straight], tag="mlp")
    c.check("an MLP run skips the CNN's checkpoints naming both models",
            "it is of model '%s'" % MODEL in errs[0] and "not 'mlp:784-16-10'" in errs[0]
            and "no checkpoint found" in errs[0])
    p = subprocess.run([WORKER, "--model", "cnn:c4k5-p2-f10-p2"], capture_output=True,
                       text=True, timeout=30)
    c.check("a bad spec is exit 2 naming --model (%d: %s)" % (p.returncode, p.stderr[:80]),
            p.returncode == 2 and "--model" in p.stderr.splitlines()[0])


def convs(c, work):
    args = COMMON + ["--batch-size", str(B), "--max-steps", str(STEPS), "--shuffle", "off"]
    dumps = {}
    for impl in ("im2col", "onednn"):
        p = subprocess.run([WORKER] + args + ["--conv", impl, "--dump-params",
                                              "%s/conv-%s.bin" % (work, impl)],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        if impl == "onednn" and p.returncode == 2 and "without oneDNN" in p.stderr:
            print("SKIP: this ddp-worker has no oneDNN: --conv onednn is refused, saying so")
            return
        c.check("--conv %s runs (%d)" % (impl, p.returncode), p.returncode == 0, p.stderr[-400:])
        want = "convolutions (--conv %s): c4k5 %s, c8k3 %s" % (impl, impl, impl)
        c.check("the log names each layer's convolution: %r" % want, want in p.stderr)
        dumps[impl] = read_floats("%s/conv-%s.bin" % (work, impl))
    mx, norm = rel_diff(dumps["onednn"], dumps["im2col"])
    c.check("oneDNN vs im2col after %d steps: max rel %.2e, norm rel %.2e" % (STEPS, mx, norm),
            mx <= 1e-4)
    for bad, why in ((["--conv", "fast"] + args, "want auto, im2col or onednn"),
                     (["--conv", "onednn", "--model", "mlp:784-16-10"] + COMMON[2:],
                      "has no convolutions")):
        p = subprocess.run([WORKER] + bad, capture_output=True, text=True, timeout=30)
        first = p.stderr.splitlines()[0] if p.stderr else ""
        c.check("%s is exit 2 naming --conv (%d: %s)" % (" ".join(bad[:2]), p.returncode, first),
                p.returncode == 2 and "--conv" in first and why in first)


def main():
    c = Checks("worker_cnn")
    work = tempdir("ddp-cnn-")
    try:
        equivalence(c, work)
        resume(c, work)
        convs(c, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
