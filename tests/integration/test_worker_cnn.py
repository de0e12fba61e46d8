"""The CNN in ddp-worker, as test_worker_equivalence.py and test_worker_resume.py check the
MLP: with the same seed, W = 2 and W = 4 ranks with batch B each give after 20 steps the
same parameters (relative 1e-5) as 1 process with batch W*B, with overlap on (many buckets)
and off (one bucket), every rank bit-identical, and a 1-process run with batch B far off.
Then checkpoints: 1 epoch, then a resumed run to 2 epochs, ends bit-identical to 2 epochs
straight; an MLP run over the CNN's folder skips its checkpoints naming both models, and a
bad spec is exit 2 naming --model.
"""
import os
import shutil
import subprocess

from worker_util import WORKER, Checks, read_floats, rel_diff, run_ok, tempdir

B = 8
STEPS = 20
MODEL = "cnn:c4k5-p2-c8k3-p2-f32-f10"
COMMON = ["--model", MODEL, "--data", "synthetic:1024:784:10", "--seed", "7",
          "--lr", "0.05", "--lr-scale", "none", "--momentum", "0.9", "--weight-decay", "0.001",
          "--timeout", "30", "--backend", "cpu"]


def equivalence(c, work):
    steps = ["--max-steps", str(STEPS), "--epochs", "3"]
    refs = {}
    for w in (2, 4):
        dump = "%s/ref%d.bin" % (work, w)
        run_ok(work, 1, COMMON + steps + ["--batch-size", str(w * B), "--dump-params", dump],
               tag="ref%d" % w)
        refs[w] = read_floats(dump)
    small = "%s/refsmall.bin" % work
    run_ok(work, 1, COMMON + steps + ["--batch-size", str(B), "--dump-params", small],
           tag="small")
    for w, overlap, cap in ((2, True, "0.0002"), (4, True, "0.0002"), (2, False, "25")):
        tag = "w%d-%s" % (w, "ov" if overlap else "noov")
        dump = work + "/" + tag + ".rank{rank}.bin"
        args = COMMON + steps + ["--batch-size", str(B), "--bucket-cap-mb", cap,
                                 "--dump-params", dump]
        if not overlap:
            args.append("--no-overlap")
        _, errs = run_ok(work, w, args, tag=tag)
        nb = [l for l in errs[0].splitlines() if "buckets=" in l]
        buckets = int(nb[0].split("buckets=")[1].split()[0]) if nb else -1
        c.check("%s: %d buckets" % (tag, buckets), buckets >= 3 if overlap else buckets == 1)
        p0 = read_floats(dump.replace("{rank}", "0"))
        pl = read_floats(dump.replace("{rank}", str(w - 1)))
        c.check("%s: ranks 0 and %d bit-identical" % (tag, w - 1), p0 == pl)
        mx, nrm = rel_diff(p0, refs[w])
        c.check("%s: vs 1 process with batch %d: max rel %.2e, norm rel %.2e"
                % (tag, w * B, mx, nrm), mx < 1e-5 and nrm < 1e-5)
    mx, _ = rel_diff(read_floats(small), refs[2])
    c.check("batch %d vs %d differ (max rel %.2e): the check can fail" % (B, 2 * B, mx),
            mx > 1e-3)


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
