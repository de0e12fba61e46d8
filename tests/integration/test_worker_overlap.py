"""Overlap is real: with two ranks and a model whose gradients make two buckets, rank 0's
trace (--trace) shows bucket 0's all-reduce issued before the backward of the first layer
(layer 0, the last one the backward reaches) ends, in every step; buckets are issued in
bucket order. With --no-overlap the same trace shows every issue after that layer's end, so
the check tells the two apart.
"""
import shutil

from worker_util import Checks, run_ok, tempdir

ARGS = ["--model", "mlp:256-512-512-10", "--data", "synthetic:2048:256:10", "--seed", "3",
        "--batch-size", "32", "--bucket-cap-mb", "0.5", "--max-steps", "12", "--epochs", "1",
        "--timeout", "30"]


def parse(path):
    steps = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            t, step, kind, idx = line.split()
            steps.setdefault(int(step), []).append((int(t), kind, int(idx)))
    return steps


def main():
    c = Checks("worker_overlap")
    work = tempdir("ddp-overlap-")
    try:
        for overlap in (True, False):
            tag = "ov" if overlap else "noov"
            trace = "%s/%s.rank{rank}.trace" % (work, tag)
            args = ARGS + ["--trace", trace] + ([] if overlap else ["--no-overlap"])
            run_ok(work, 2, args, tag=tag)
            steps = parse(trace.replace("{rank}", "0"))
            c.check("%s: 12 steps traced" % tag, len(steps) == 12, str(sorted(steps)))
            before = 0
            ordered = True
            nbuckets = set()
            for s, ev in steps.items():
                end0 = [t for t, k, i in ev if k == "bwd_end" and i == 0]
                issues = [(t, i) for t, k, i in ev if k == "ar_issue"]
                nbuckets.add(len(issues))
                if [i for _, i in issues] != sorted(i for _, i in issues):
                    ordered = False
                first_issue = min(t for t, _ in issues)
                if end0 and first_issue < end0[0]:
                    before += 1
            c.check("%s: two buckets a step (%s)" % (tag, nbuckets), nbuckets == {2})
            c.check("%s: issued in bucket order" % tag, ordered)
            if overlap:
                c.check("overlap: bucket 0 issued before layer 0's backward ended in %d of %d"
                        " steps" % (before, len(steps)), before == len(steps))
            else:
                c.check("no-overlap: no bucket issued before layer 0's backward ended (%d)"
                        % before, before == 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
