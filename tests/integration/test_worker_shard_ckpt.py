"""Sharded checkpoints (ddp/resume_shard.h) of ddp-worker --sharding full and grad, with no
shared folder: 2 nodes x 2 ranks, each node its own checkpoint dir.

- Every rank writes its shard and a copy lands on the other node: each node's dir holds all
  4 shards of an epoch, and no whole-state file is written.
- Killed after epoch 1 and resumed on the same 4 ranks, the run ends bit-identical to a
  straight one.
- Elastic: a node is lost (its dir gone); the 4 ranks' shards reshard onto the 2 ranks
  left (global batch kept), which are killed after epoch 2; the node returns with its stale
  dir and the job grows back to 4 ranks from the 2 ranks' shards: the final parameters
  agree with the uninterrupted 4-rank run within 1e-4 relative (1.3e-5 measured, printed),
  the same math summed in another order, and so does the final validation loss.
- Resharding moves the state exactly: a checkpoint of 2 ranks loaded at 1, 3 and 4 ranks
  (no epoch left to train), and at 3 ranks with its layers grouped into other units
  (--min-unit-params), dumps the writer's parameters bit for bit.
- A corrupt shard is skipped for its copy on the other node; a shard lost on both nodes
  makes the checkpoint incomplete, and the run does not take it.
- A preemption notice mid-epoch: every rank writes its shard at that step, exits 10, and the
  resume continues at the next step, bit-identical to a straight run; in the first epoch
  too (shards of epoch 0).
- hybrid: each node writes its copy's shards, none travels; resumed on 2 nodes and on 1.
- One rank resumes 4 ranks' shards whole; the whole-state checkpoint it then writes is newer
  than the shards and wins over them.
"""
import glob
import os
import shutil

from worker_util import Checks, Ranks, read_floats, rel_diff, run_ok, tempdir, write_sentences


def gpt(work, mode, batch):
    return ["--model", "gpt:2-2-32-16", "--data", "text:%s/t.txt,%s/v.txt" % (work, work),
            "--seed", "5", "--optimizer", "adamw", "--lr", "0.003", "--weight-decay", "0.1",
            "--clip-grad-norm", "0.5", "--warmup-steps", "5", "--timeout", "30",
            "--backend", "cpu", "--batch-size", str(batch), "--sharding", mode,
            "--lr-scale", "none"]


def val_loss(out):
    """The last report's validation loss (nats per byte) in rank 0's stdout."""
    last = [ln for ln in out.splitlines() if "| val loss " in ln][-1]
    return float(last.split("| val loss ")[1].split()[0])


def shards(d, epoch, pos=0):
    return sorted(os.path.basename(p)
                  for p in glob.glob("%s/ckpt-%06d-pos-%d-shard-*" % (d, epoch, pos)))


def killed_after(c, work, world, args, nodes, dirs, epoch, tag):
    with Ranks(work, world, args + ["--kill-after-epoch", str(epoch)], nodes=nodes,
               ckpt_dirs=dirs, tag=tag) as rk:
        codes = rk.wait(120)
    c.check("%s: killed after epoch %d (%s)" % (tag, epoch, codes), all(x == -9 for x in codes))


def elastic(c, work, mode):
    a, b = work + "/%s-a" % mode, work + "/%s-b" % mode
    straight = work + "/%s-straight.bin" % mode
    outs, errs = run_ok(work, 4, gpt(work, mode, 4) + ["--epochs", "3", "--dump-params",
                                                       straight],
                        nodes=2, ckpt_dirs=[work + "/%s-sa" % mode, work + "/%s-sb" % mode],
                        tag=mode + "-straight")
    val_straight = val_loss(outs[0])
    # rank 0's keeper: the rank at its place on the next node
    c.check("%s: rank 0's log names the keeper of its copy, rank 2" % mode,
            "its copy on rank 2 (another node)" in errs[0], errs[0][-400:])
    killed_after(c, work, 4, gpt(work, mode, 4) + ["--epochs", "3"], 2, [a, b], 1,
                 mode + "-first")
    want = ["ckpt-000001-pos-0-shard-%04d-of-0004.bin" % k for k in range(4)]
    c.check("%s: each node holds all 4 shards of epoch 1, its own and copies (%s)"
            % (mode, shards(a, 1)), shards(a, 1) == want and shards(b, 1) == want)
    c.check("%s: no whole-state checkpoint was written" % mode,
            not glob.glob(a + "/ckpt-??????.bin") and not glob.glob(b + "/ckpt-??????.bin"))
    # the same 4 ranks resume: bit-identical to the straight run
    a2, b2 = a + "-same", b + "-same"
    shutil.copytree(a, a2)
    shutil.copytree(b, b2)
    same = work + "/%s-same.bin" % mode
    _, errs = run_ok(work, 4, gpt(work, mode, 4) + ["--epochs", "3", "--dump-params", same],
                     nodes=2, ckpt_dirs=[a2, b2], tag=mode + "-same")
    c.check("%s: resumed from the sharded checkpoint of 4 ranks" % mode,
            "from a sharded checkpoint of 4 ranks" in errs[0], errs[0][-400:])
    c.check("%s: resumed on 4 ranks == straight, bit for bit" % mode,
            read_floats(same) == read_floats(straight))
    # node A is lost: the 2 ranks of node B reshard the 4 shards (batch 8: the same 16)
    shutil.rmtree(a + "-same")
    stale = a + "-stale"
    shutil.copytree(a, stale)
    shutil.rmtree(a)
    killed_after(c, work, 2, gpt(work, mode, 8) + ["--epochs", "3"], 1, [b], 2, mode + "-two")
    c.check("%s: node B's 2 ranks wrote epoch 2 in 2 shards (%s)" % (mode, shards(b, 2)),
            shards(b, 2) == ["ckpt-000002-pos-0-shard-%04d-of-0002.bin" % k for k in range(2)])
    # node A returns with its stale dir (epoch 1 only): the job grows back to 4 ranks
    grown = work + "/%s-grown.bin" % mode
    outs, errs = run_ok(work, 4, gpt(work, mode, 4) + ["--epochs", "3", "--dump-params", grown],
                        nodes=2, ckpt_dirs=[stale, b], tag=mode + "-grown")
    c.check("%s: the grown job resumed after epoch 2 from 2 ranks' shards, resharded" % mode,
            "resuming after epoch 2 from a sharded checkpoint of 2 ranks" in errs[0] and
            "resharded" in errs[0], errs[0][-600:])
    mx, nrm = rel_diff(read_floats(grown), read_floats(straight))
    val = val_loss(outs[0])
    print("%s: 4 -> 2 -> 4 ranks against the uninterrupted run: parameters max rel %.2e, norm "
          "rel %.2e; final validation loss %.4f against %.4f" % (mode, mx, nrm, val, val_straight))
    # a resume that lost the optimizer state or a shard lands ~1e-2 away
    c.check("%s: 4 -> 2 -> 4 ranks ends where the uninterrupted run does (max rel %.2e)"
            % (mode, mx), mx <= 1e-4)
    c.check("%s: the final validation loss is the uninterrupted run's (%.4f, %.4f)"
            % (mode, val, val_straight), abs(val - val_straight) <= 1e-3 * val_straight)
    return b


def exact_reshard(c, work, mode):
    d = work + "/%s-exact" % mode
    ref = work + "/%s-exact-ref.bin" % mode
    run_ok(work, 2, gpt(work, mode, 4) + ["--epochs", "1", "--dump-params", ref], ckpt_dirs=[d],
           tag=mode + "-exact")
    for w in (1, 3, 4):
        out = work + "/%s-exact-%d.bin" % (mode, w)
        dd = "%s-%d" % (d, w)
        shutil.copytree(d, dd)
        _, errs = run_ok(work, w, gpt(work, mode, 4) + ["--epochs", "1", "--dump-params", out],
                         ckpt_dirs=[dd], tag="%s-exact-%d" % (mode, w))
        c.check("%s: 2 ranks' shards loaded at %d rank(s): the same parameters, bit for bit"
                % (mode, w), read_floats(out) == read_floats(ref) and
                "from a sharded checkpoint of 2 ranks" in errs[0], errs[0][-400:])
    # a run that groups its layers into other units takes the same state
    out = work + "/%s-exact-grouped.bin" % mode
    shutil.copytree(d, d + "-grouped")
    _, errs = run_ok(work, 3, gpt(work, mode, 4) + ["--epochs", "1", "--dump-params", out,
                                                     "--min-unit-params", "20000"],
                     ckpt_dirs=[d + "-grouped"], tag="%s-exact-grouped" % mode)
    c.check("%s: 2 ranks' per-layer shards loaded at 3 ranks in 2 grouped units: the same "
            "parameters, bit for bit" % mode, read_floats(out) == read_floats(ref) and
            "sharding %s: 2 units" % mode in errs[0], errs[0][-400:])


def damaged(c, work, b):
    # node B's dir holds epoch 3 (4 shards) and epoch 2 (2 shards); a copy per node, of
    # epoch 2 only
    n1, n2 = work + "/dmg-1", work + "/dmg-2"
    for d in (n1, n2):
        shutil.copytree(b, d)
        for p in glob.glob(d + "/ckpt-000003-*"):
            os.remove(p)
    p = n1 + "/ckpt-000002-pos-0-shard-0000-of-0002.bin"
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(p, "wb").write(bytes(data))
    _, errs = run_ok(work, 2, gpt(work, "full", 8) + ["--epochs", "2"], nodes=2,
                     ckpt_dirs=[n1, n2], tag="dmg")
    c.check("a corrupt shard is skipped, naming it, for the other node's copy",
            "skipping checkpoint %s" % p in errs[0] and
            "resuming after epoch 2 from a sharded checkpoint of 2 ranks" in errs[0],
            errs[0][-600:])
    for d in (n1, n2):
        os.remove(d + "/ckpt-000002-pos-0-shard-0001-of-0002.bin")
    _, errs = run_ok(work, 2, gpt(work, "full", 8) + ["--epochs", "1"], nodes=2,
                     ckpt_dirs=[n1, n2], tag="lost")
    c.check("a shard lost on every node: the checkpoint is incomplete, the run starts over",
            "is incomplete" in errs[0] and "no checkpoint found" in errs[0], errs[0][-600:])
    # one rank resumes the 4 shards of epoch 3 whole and writes a whole-state checkpoint of
    # epoch 4 (nothing to shard), which is then newer than every shard
    one = work + "/dmg-one"
    shutil.copytree(b, one)
    _, errs = run_ok(work, 1, gpt(work, "full", 16) + ["--epochs", "4"], ckpt_dirs=[one],
                     tag="one")
    c.check("one rank resumed 4 ranks' shards and wrote a whole-state checkpoint of epoch 4",
            "resuming after epoch 3 from a sharded checkpoint of 4 ranks" in errs[0] and
            os.path.exists(one + "/ckpt-000004.bin"), errs[0][-600:])
    _, errs = run_ok(work, 2, gpt(work, "full", 8) + ["--epochs", "4"], ckpt_dirs=[one],
                     tag="whole-newer")
    c.check("the newer whole-state checkpoint wins over older shards",
            "resuming after epoch 4 from rank 0's checkpoint" in errs[0], errs[0][-600:])


def preempted(c, work):
    """A preemption notice mid-epoch under full: every rank writes its shard at that step
    (position in the header and the name of its completed epochs), exits 10, and the resume
    at the same world size continues at the next step, bit-identical to a straight run."""
    d = [work + "/pre-a", work + "/pre-b"]
    straight = work + "/pre-straight.bin"
    run_ok(work, 4, gpt(work, "full", 4) + ["--epochs", "2", "--dump-params", straight],
           nodes=2, ckpt_dirs=[work + "/pre-sa", work + "/pre-sb"], tag="pre-straight")
    with Ranks(work, 4, gpt(work, "full", 4) + ["--epochs", "2", "--notice-at-step", "30"],
               nodes=2, ckpt_dirs=d, tag="pre") as rk:
        codes = rk.wait(120)
    c.check("preempted at step 30: every rank exits 10 (%s)" % codes, codes == [10] * 4)
    c.check("each node holds the 4 shards of the stop beside epoch 1's end (%s)"
            % shards(d[1], 1, 96),
            shards(d[0], 1, 96) == shards(d[1], 1, 96) ==
            ["ckpt-000001-pos-96-shard-%04d-of-0004.bin" % k for k in range(4)] and
            len(shards(d[0], 1)) == 4)
    out = work + "/pre-resumed.bin"
    _, errs = run_ok(work, 4, gpt(work, "full", 4) + ["--epochs", "2", "--dump-params", out],
                     nodes=2, ckpt_dirs=d, tag="pre-resumed")
    c.check("resumed mid-epoch from the shards (epoch_pos 96)",
            "from a sharded checkpoint of 4 ranks (step 30, epoch_pos 96)" in errs[0],
            errs[0][-400:])
    c.check("the preempted and resumed run == straight, bit for bit",
            read_floats(out) == read_floats(straight))
    # the notice in the first epoch: shards of epoch 0, which the restart takes up
    d = [work + "/pre0-a", work + "/pre0-b"]
    with Ranks(work, 4, gpt(work, "full", 4) + ["--epochs", "2", "--notice-at-step", "5"],
               nodes=2, ckpt_dirs=d, tag="pre0") as rk:
        codes = rk.wait(120)
    c.check("preempted at step 5 (epoch 1): every rank exits 10 (%s)" % codes, codes == [10] * 4)
    first = sorted(os.path.basename(p) for p in glob.glob(d[0] + "/ckpt-000000-pos-*-shard-*"))
    c.check("each node holds the 4 shards of epoch 0 (%s)" % first, len(first) == 4)
    out = work + "/pre0-resumed.bin"
    _, errs = run_ok(work, 4, gpt(work, "full", 4) + ["--epochs", "2", "--dump-params", out],
                     nodes=2, ckpt_dirs=d, tag="pre0-resumed")
    c.check("resumed in the first epoch from the shards (step 5)",
            "from a sharded checkpoint of 4 ranks (step 5, epoch_pos" in errs[0], errs[0][-400:])
    c.check("preempted in the first epoch and resumed == straight, bit for bit",
            read_floats(out) == read_floats(straight))


def hybrid(c, work):
    """hybrid: each node writes the shards of its own copy (2 of 2 ranks), and no copy
    travels between nodes; resumed bit-identical on 2 nodes, and on the 1 node left."""
    a, b = work + "/hyb-a", work + "/hyb-b"
    straight = work + "/hyb-straight.bin"
    run_ok(work, 4, gpt(work, "hybrid", 4) + ["--epochs", "2", "--dump-params", straight],
           nodes=2, ckpt_dirs=[work + "/hyb-sa", work + "/hyb-sb"], tag="hyb-straight")
    killed_after(c, work, 4, gpt(work, "hybrid", 4) + ["--epochs", "2"], 2, [a, b], 1,
                 "hyb-first")
    want = ["ckpt-000001-pos-0-shard-%04d-of-0002.bin" % k for k in range(2)]
    c.check("hybrid: each node holds its own 2 shards of 2 (%s, %s)" % (shards(a, 1),
                                                                       shards(b, 1)),
            shards(a, 1) == want and shards(b, 1) == want)
    shutil.copytree(b, b + "-lost")
    out = work + "/hyb-resumed.bin"
    _, errs = run_ok(work, 4, gpt(work, "hybrid", 4) + ["--epochs", "2", "--dump-params", out],
                     nodes=2, ckpt_dirs=[a, b], tag="hyb-resumed")
    c.check("hybrid: resumed on 2 nodes == straight, bit for bit",
            "from a sharded checkpoint of 2 ranks" in errs[0] and
            read_floats(out) == read_floats(straight), errs[0][-400:])
    _, errs = run_ok(work, 2, gpt(work, "hybrid", 8) + ["--epochs", "2"], nodes=1,
                     ckpt_dirs=[b + "-lost"], tag="hyb-one-node")
    c.check("hybrid: node a lost, node b alone resumes its copy",
            "resuming after epoch 1 from a sharded checkpoint of 2 ranks" in errs[0],
            errs[0][-400:])
    # a 3-epoch hybrid run keeps two complete checkpoints in each folder, not every epoch's
    p = [work + "/hyb-pa", work + "/hyb-pb"]
    run_ok(work, 4, gpt(work, "hybrid", 4) + ["--epochs", "3"], nodes=2, ckpt_dirs=p,
           tag="hyb-prune")
    kept = sorted(set(os.path.basename(f).split("-shard-")[0]
                      for f in glob.glob(p[0] + "/ckpt-*-shard-*")))
    c.check("hybrid: after 3 epochs a folder keeps epochs 2 and 3 (%s)" % kept,
            kept == ["ckpt-000002-pos-0", "ckpt-000003-pos-0"])


def main():
    c = Checks("worker_shard_ckpt")
    work = tempdir("ddp-shardckpt-")
    try:
        # 384 windows of 16 bytes: whole global batches of 16 at every world size, so that
        # DistributedSampler's padding (which depends on the world size) adds no sample
        write_sentences(work + "/t.txt", 384 * 16 + 1, 1)
        write_sentences(work + "/v.txt", 1000, 2)
        b = elastic(c, work, "full")
        elastic(c, work, "grad")
        exact_reshard(c, work, "full")
        damaged(c, work, b)
        preempted(c, work)
        hybrid(c, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    main()
