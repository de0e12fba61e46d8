"""Preemption notice in ddp-worker: 2 nodes x 2 ranks, synthetic data, 64 steps an epoch.
  - rank 0 gets the notice signal after step 100 (--notice-at-step, which raises the real
    SIGUSR1): every rank stops after that same step, node 0 and node 1 each write a
    checkpoint holding epoch 1 and position 36 * 32 * 4 = 4608, every rank exits 10
    (preempted); the restarted job continues at step 101 (epoch 2) and ends with parameters
    bit-identical to an uninterrupted run;
  - SIGUSR1 sent from outside to rank 3 only, once the first checkpoint exists: the ranks
    agree, all exit 10 at one step, and the resume is bit-identical again;
  - the notice in the first epoch (step 20): epoch 0's checkpoint, taken up on restart;
  - the notice during an epoch's last step: the epoch's own checkpoint is the one (position
    0), exit 10, bit-identical resume;
  - a mid-epoch checkpoint resumed at another world size (2 ranks on 1 node) trains on to
    the end;
  - DDP_PREEMPT_SIGNAL=SIGUSR2 moves the handler; a bad name is exit 2 naming it.
Every wait is bounded.
"""
import os
import re
import shutil
import signal
import time

from worker_util import Checks, Ranks, run_ok, tempdir

EPOCHS = 3
ARGS = ["--model", "mlp:64-128-64-8", "--data", "synthetic:8192:64:8", "--seed", "5",
        "--batch-size", "32", "--epochs", str(EPOCHS), "--timeout", "30"]
PREEMPTED = 10


def dirs(work, name):
    return ["%s/%s-node0" % (work, name), "%s/%s-node1" % (work, name)]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def noticed(c, rk, name, want_step=None):
    codes = rk.wait(120)
    c.check("%s: every rank exits %d (preempted) (%s)" % (name, PREEMPTED, codes),
            all(x == PREEMPTED for x in codes), rk.logs())
    steps = set()
    for r in range(4):
        m = re.search(r"preempted: checkpoint at step (\d+)", rk.err(r))
        steps.add(int(m.group(1)) if m else None)
    c.check("%s: all ranks stopped after the same step (%s)" % (name, steps),
            len(steps) == 1 and None not in steps, rk.logs())
    step = steps.pop() if len(steps) == 1 else None
    if want_step is not None:
        c.check("%s: at step %d" % (name, want_step), step == want_step)
    return step


def restart(c, work, name, d, step, final, world=4, nodes=2):
    dump = "%s/%s.params" % (work, name)
    t0 = time.monotonic()
    outs, errs = run_ok(work, world, ARGS + ["--dump-params", dump], nodes=nodes,
                        ckpt_dirs=d, tag=name + "-restart")
    m = re.search(r"resuming after epoch (\d+) from rank \d+'s checkpoint step=(\d+) "
                  r"epoch_pos=(\d+)", errs[0])
    c.check("%s: resumes at step %s (%s)" % (name, step, m.group(0) if m else errs[0][-800:]),
            m is not None and int(m.group(2)) == step)
    if final is not None:
        c.check("%s: parameters bit-identical to the uninterrupted run" % name,
                read(dump) == final)
    return m, outs, time.monotonic() - t0


def main():
    c = Checks("worker_preempt")
    work = tempdir("ddp-preempt-")
    try:
        full = "%s/full.params" % work
        t0 = time.monotonic()
        run_ok(work, 4, ARGS + ["--dump-params", full], nodes=2, ckpt_dirs=dirs(work, "full"),
               tag="full")
        print("uninterrupted run: %.2f s" % (time.monotonic() - t0))
        final = read(full)

        d = dirs(work, "self")
        with Ranks(work, 4, ARGS + ["--notice-at-step", "100"], nodes=2, ckpt_dirs=d,
                   tag="self") as rk:
            noticed(c, rk, "self", 100)
        for nd in d:
            c.check("self: %s holds ckpt-000001.bin (%s)" % (os.path.basename(nd),
                                                             sorted(os.listdir(nd))),
                    sorted(os.listdir(nd)) == ["ckpt-000001.bin"])
        m, outs, _ = restart(c, work, "self", d, 100, final)
        c.check("self: position 4608 of epoch 2", m is not None and int(m.group(3)) == 4608)
        first = [l for l in outs[0].splitlines() if l.startswith("epoch ")]
        c.check("self: the first epoch line after the resume is epoch 2 (%s)" % first[:1],
                bool(first) and first[0].startswith("epoch 2/%d " % EPOCHS))

        # the notice in the first epoch: its checkpoint is epoch 0's (ckpt-000000.bin at
        # position 20 * 32 * 4), and the restart takes it up instead of starting over
        d = dirs(work, "first")
        with Ranks(work, 4, ARGS + ["--notice-at-step", "20"], nodes=2, ckpt_dirs=d,
                   tag="first") as rk:
            noticed(c, rk, "first", 20)
        for nd in d:
            c.check("first: %s holds ckpt-000000.bin (%s)" % (os.path.basename(nd),
                                                              sorted(os.listdir(nd))),
                    sorted(os.listdir(nd)) == ["ckpt-000000.bin"])
        m, _, _ = restart(c, work, "first", d, 20, final)
        c.check("first: position 2560 of epoch 1", m is not None and int(m.group(3)) == 2560)

        d = dirs(work, "ext")
        with Ranks(work, 4, ARGS, nodes=2, ckpt_dirs=d, tag="ext") as rk:
            deadline = time.monotonic() + 120
            marker = os.path.join(d[1], "ckpt-000001.bin")
            while not os.path.exists(marker) and time.monotonic() < deadline:
                if any(p.poll() is not None for p in rk.procs):
                    break
                time.sleep(0.005)
            t_sig = time.monotonic()
            os.kill(rk.procs[3].pid, signal.SIGUSR1)
            step = noticed(c, rk, "ext")
            print("ext: notice to rank 3 -> every rank exited in %.3f s (step %s)" %
                  (time.monotonic() - t_sig, step))
        if step is not None and step < EPOCHS * 64:
            restart(c, work, "ext", d, step, final)

        d = dirs(work, "edge")
        with Ranks(work, 4, ARGS + ["--notice-at-step", "64"], nodes=2, ckpt_dirs=d,
                   tag="edge") as rk:
            noticed(c, rk, "edge", 64)
        m, _, _ = restart(c, work, "edge", d, 64, final)
        c.check("edge: position 0 (the epoch's own checkpoint)",
                m is not None and int(m.group(3)) == 0)

        d = dirs(work, "self")
        # the "self" folders hold the finished run now; make a mid-epoch one again
        for nd in d:
            shutil.rmtree(nd, ignore_errors=True)
        with Ranks(work, 4, ARGS + ["--notice-at-step", "100"], nodes=2, ckpt_dirs=d,
                   tag="shrink") as rk:
            noticed(c, rk, "shrink", 100)
        restart(c, work, "shrink", d[:1], 100, None, world=2, nodes=1)

        with Ranks(work, 2, ARGS + ["--notice-at-step", "10"], nodes=1,
                   env={"DDP_PREEMPT_SIGNAL": "SIGUSR2"}, tag="usr2") as rk:
            codes = rk.wait(120)
            c.check("usr2: --notice-at-step raises SIGUSR2, handled: exit 10 (%s)" % codes,
                    codes == [PREEMPTED, PREEMPTED], rk.logs())
        with Ranks(work, 1, ARGS, nodes=1, env={"DDP_PREEMPT_SIGNAL": "SIGKILL"},
                   tag="bad") as rk:
            codes = rk.wait(60)
            c.check("bad: DDP_PREEMPT_SIGNAL=SIGKILL is exit 2 (%s)" % codes,
                    codes == [2] and "DDP_PREEMPT_SIGNAL" in rk.err(0), rk.logs())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
