"""DDP equivalence, the way PyTorch tests DDP: with the same seed, W = 2 and W = 4 ranks with
batch B each give after 20 steps the same parameters (relative 1e-5) as 1 process with batch
W*B, with overlap on and off, with one bucket and with many buckets. Also: every rank ends
with bit-identical parameters, and a 1-process run with batch B (not W*B) is far off, so the
comparison can tell a wrong reduction from a right one.
"""
import shutil

from worker_util import Checks, read_floats, rel_diff, run_ok, tempdir

B = 16
STEPS = 20
COMMON = ["--model", "mlp:32-64-48-4", "--data", "synthetic:4096:32:4", "--seed", "7",
          "--lr", "0.05", "--lr-scale", "none", "--momentum", "0.9", "--weight-decay", "0.001",
          "--max-steps", str(STEPS), "--epochs", "3", "--timeout", "30"]


def main():
    c = Checks("worker_equivalence")
    work = tempdir("ddp-equiv-")
    try:
        refs = {}
        for w in (2, 4):
            dump = "%s/ref%d.bin" % (work, w)
            run_ok(work, 1, COMMON + ["--batch-size", str(w * B), "--dump-params", dump],
                   tag="ref%d" % w)
            refs[w] = read_floats(dump)
        small = "%s/refsmall.bin" % work
        run_ok(work, 1, COMMON + ["--batch-size", str(B), "--dump-params", small], tag="small")
        for w in (2, 4):
            for overlap in (True, False):
                for cap, label in (("25", "one bucket"), ("0.0002", "many buckets")):
                    tag = "w%d-%s-%s" % (w, "ov" if overlap else "noov", label.split()[0])
                    dump = work + "/" + tag + ".rank{rank}.bin"
                    args = COMMON + ["--batch-size", str(B), "--bucket-cap-mb", cap,
                                     "--dump-params", dump, "--trace",
                                     work + "/" + tag + ".rank{rank}.trace"]
                    if not overlap:
                        args.append("--no-overlap")
                    _, errs = run_ok(work, w, args, tag=tag)
                    nb = [l for l in errs[0].splitlines() if "buckets=" in l]
                    buckets = int(nb[0].split("buckets=")[1].split()[0]) if nb else -1
                    want_many = label == "many buckets"
                    c.check("%s: bucket count %d fits '%s'" % (tag, buckets, label),
                            (buckets >= 4) if want_many else (buckets == 1))
                    p0 = read_floats(dump.replace("{rank}", "0"))
                    pl = read_floats(dump.replace("{rank}", str(w - 1)))
                    c.check("%s: ranks 0 and %d bit-identical" % (tag, w - 1), p0 == pl)
                    mx, nrm = rel_diff(p0, refs[w])
                    c.check("%s: vs 1 process with batch %d: max rel %.2e, norm rel %.2e"
                            % (tag, w * B, mx, nrm), mx < 1e-5 and nrm < 1e-5)
        mx, nrm = rel_diff(read_floats(small), refs[2])
        c.check("batch %d vs %d differ (max rel %.2e): the check can fail" % (B, 2 * B, mx),
                mx > 1e-3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
