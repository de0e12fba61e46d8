"""Resume: 2 nodes x 2 ranks (GROUP_RANK 0/1, LOCAL_RANK 0/1), each node with its own
checkpoint dir. A job killed (SIGKILL) after epoch 2 and restarted continues at epoch 3 and
ends with parameters bit-identical to an uninterrupted run:
  - plainly;
  - with node 0's (rank 0's) checkpoint dir deleted: rank 2's replica is broadcast;
  - with the newest checkpoint corrupted on both nodes: skipped with a warning naming the
    file, the job resumes after epoch 1 and still ends bit-identical;
  - killed from outside at an arbitrary moment after the first checkpoint appeared.
"""
import os
import re
import shutil
import signal
import time

from worker_util import Checks, Ranks, run_ok, tempdir

EPOCHS = 4
CKPT = re.compile(r"^ckpt-\d{6}\.bin$")
ARGS = ["--model", "mlp:64-128-64-8", "--data", "synthetic:8192:64:8", "--seed", "11",
        "--batch-size", "32", "--epochs", str(EPOCHS), "--timeout", "30"]


def dirs(work, name):
    return ["%s/%s-node0" % (work, name), "%s/%s-node1" % (work, name)]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def killed_run(c, work, name):
    d = dirs(work, name)
    with Ranks(work, 4, ARGS + ["--kill-after-epoch", "2"], nodes=2, ckpt_dirs=d,
               tag=name + "-killed") as rk:
        codes = rk.wait(120)
        c.check("%s: every rank died by SIGKILL after epoch 2 (%s)" % (name, codes),
                all(x == -signal.SIGKILL for x in codes), rk.logs())
    for nd in d:
        files = sorted(os.listdir(nd)) if os.path.isdir(nd) else []
        c.check("%s: %s holds epochs 1 and 2 (%s)" % (name, os.path.basename(nd), files),
                files == ["ckpt-000001.bin", "ckpt-000002.bin"])
    return d


def restart(c, work, name, d, want_epoch, want_owner, final):
    dump = "%s/%s.params" % (work, name)
    outs, errs = run_ok(work, 4, ARGS + ["--dump-params", dump], nodes=2, ckpt_dirs=d,
                        tag=name + "-restart")
    first = [l for l in outs[0].splitlines() if l.startswith("epoch ")]
    c.check("%s: rank 0 continues at epoch %d (%s)" % (name, want_epoch + 1,
                                                         first[:1]),
            bool(first) and first[0].startswith("epoch %d/%d " % (want_epoch + 1, EPOCHS)))
    msg = "resuming after epoch %d from rank %d's checkpoint" % (want_epoch, want_owner)
    c.check("%s: every rank logs '%s'" % (name, msg), all(msg in e for e in errs),
            errs[0][-1500:])
    c.check("%s: parameters bit-identical to the uninterrupted run" % name,
            read(dump) == final)
    return errs


def main():
    c = Checks("worker_resume")
    work = tempdir("ddp-resume-")
    try:
        full = "%s/full.params" % work
        outs, _ = run_ok(work, 4, ARGS + ["--dump-params", full], nodes=2,
                         ckpt_dirs=dirs(work, "full"), tag="full")
        final = read(full)
        c.check("uninterrupted run printed %d epochs" % EPOCHS,
                sum(l.startswith("epoch ") for l in outs[0].splitlines()) == EPOCHS)
        for nd in dirs(work, "full"):
            c.check("only the newest two checkpoints kept in %s" % os.path.basename(nd),
                    sorted(os.listdir(nd)) == ["ckpt-000003.bin", "ckpt-000004.bin"])

        d = killed_run(c, work, "plain")
        restart(c, work, "plain", d, 2, 0, final)

        d = killed_run(c, work, "gone")
        shutil.rmtree(d[0])
        restart(c, work, "gone", d, 2, 2, final)
        c.check("gone: node 0 keeps a replica again",
                os.path.exists(os.path.join(d[0], "ckpt-000004.bin")))

        d = killed_run(c, work, "corrupt")
        for nd in d:
            p = os.path.join(nd, "ckpt-000002.bin")
            b = bytearray(read(p))
            b[len(b) // 2] ^= 0x40
            with open(p, "wb") as f:
                f.write(b)
        errs = restart(c, work, "corrupt", d, 1, 0, final)
        c.check("corrupt: the skipped file is named in a warning",
                "skipping checkpoint %s" % os.path.join(d[0], "ckpt-000002.bin") in errs[0]
                and "checksum" in errs[0])

        d = dirs(work, "ext")
        with Ranks(work, 4, ARGS, nodes=2, ckpt_dirs=d, tag="ext-killed") as rk:
            deadline = time.monotonic() + 120
            marker = os.path.join(d[1], "ckpt-000001.bin")
            while not os.path.exists(marker) and time.monotonic() < deadline:
                if all(p.poll() is not None for p in rk.procs):
                    break
                time.sleep(0.01)
            rk.kill()
        # The kill may land between the two nodes' writes, or during one (a temp file):
        # the newest complete checkpoint of either node is where the job must resume.
        newest = [max([int(f[5:11]) for f in os.listdir(nd) if CKPT.match(f)] or [0])
                  for nd in d]
        c.check("ext: killed after a first checkpoint (newest per node %s)" % newest,
                max(newest) >= 1)
        if 1 <= max(newest) < EPOCHS:
            owner = 0 if newest[0] == max(newest) else 2
            restart(c, work, "ext", d, max(newest), owner, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
