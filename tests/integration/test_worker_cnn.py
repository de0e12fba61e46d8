"""The CNN in ddp-worker, as test_worker_equivalence.py and test_worker_resume.py check the
MLP: with the same seed, W = 2 and W = 4 ranks with batch B each give after 20 steps the
same parameters (relative 1e-5) as 1 process with batch W*B, with overlap on (many buckets)
and off (one bucket), every rank bit-identical, and a 1-process run with batch B far off;
the same with dropout layers in the spec (a sample's mask is its own, wherever it trains),
far from the run without them.
Then checkpoints: 1 epoch, then a resumed run to 2 epochs, ends bit-identical to 2 epochs
straight; an MLP run over the CNN's folder skips its checkpoints naming both models, and a
bad spec is exit 2 naming --model.
"""
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


def main():
    c = Checks("worker_cnn")
    work = tempdir("ddp-cnn-")
    try:
        equivalence(c, work)
        resume(c, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
