"""Fashion-MNIST with the CNN (label heavy): cnn:c32k5-p2-c64k5-p2-f1024-f10 at 4 ranks of
one thread each, batch 32 per rank, lr 0.01 per rank scaled linearly, momentum 0.9, cosine
schedule, reaches >= 0.91 test accuracy on the 10k test set within 10 epochs; prints the
accuracy of every epoch and the wall time. Skipped (exit 0 with a note) when the Debian
package dataset-fashion-mnist is not installed.
"""
import os
import re
import shutil
import sys
import time

from worker_util import Checks, run_ok, tempdir

DATA = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
LINE = re.compile(r"^epoch (\d+)/10 \| loss ([\d.]+) \| test acc ([\d.]+) \| [\d,]+ samples/s$")
MODEL = "cnn:c32k5-p2-c64k5-p2-f1024-f10"


def main():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("SKIP: Fashion-MNIST not installed under %s" % DATA)
        return
    c = Checks("worker_accuracy_cnn")
    work = tempdir("ddp-acc-cnn-")
    try:
        t0 = time.monotonic()
        outs, _ = run_ok(work, 4, ["--model", MODEL, "--backend", "cpu", "--timeout", "300",
                                   "--checkpoint-dir", ""], timeout=3000, tag="cnn4")
        secs = time.monotonic() - t0
        print(outs[0], end="", flush=True)
        a = [float(m.group(3)) for m in map(LINE.match, outs[0].splitlines()) if m]
        c.check("4 ranks printed 10 epochs", len(a) == 10, outs[0])
        c.check("4 ranks: test accuracy %.4f >= 0.91 within 10 epochs, in %.0f s"
                % (max(a or [0]), secs), bool(a) and max(a) >= 0.91)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    sys.exit(main())
