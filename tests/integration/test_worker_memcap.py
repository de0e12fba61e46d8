"""--sharding full trains, at W = 4, a model that --sharding none cannot train under the same
per-rank memory cap: each rank runs in a memory cgroup of its own capped at CAP_MIB (cgroup
v2's memory.max, or v1's memory.limit_in_bytes with the swap limit alongside). The model,
gpt:12-4-384-32 with AdamW (21.4 M parameters), needs 16 bytes a parameter (342 MB = 327 MiB) per rank
unsharded, a quarter of that plus the units in flight sharded over 4 (bench/fsdp measures
both). none must be killed by the cap (a rank killed, the cgroup's OOM count raised, the
other ranks exiting as peer lost, 6, which the agent re-forms on); full must finish its steps and report. Skips, saying so, where no memory cgroup can be made (not
root, or a cgroup v2 whose memory controller cannot be delegated here).
"""
import os
import shutil
import sys

from worker_util import Checks, Ranks, tempdir, write_sentences

CAP_MIB = 250
MODEL = "gpt:12-4-384-32"
W = 4


def mounts():
    with open("/proc/mounts") as f:
        return [line.split() for line in f]


class Cgroups:
    """Memory cgroups under a parent this test makes (and removes)."""

    def __init__(self, tag):
        self.kind, self.parent, self.made = None, None, []
        v1 = [m[1] for m in mounts() if m[2] == "cgroup" and "memory" in m[3].split(",")]
        v2 = [m[1] for m in mounts() if m[2] == "cgroup2"]
        if v1:
            self.kind, root = "v1", v1[0]
        elif v2 and "memory" in open(os.path.join(v2[0], "cgroup.controllers")).read().split():
            self.kind, root = "v2", v2[0]
        else:
            raise OSError("no memory cgroup controller is mounted")
        self.parent = os.path.join(root, tag)
        os.mkdir(self.parent)
        self.made.append(self.parent)
        if self.kind == "v2":
            # the parent delegates the memory controller to its children
            with open(os.path.join(self.parent, "cgroup.subtree_control"), "w") as f:
                f.write("+memory")

    def make(self, name, cap_bytes):
        d = os.path.join(self.parent, name)
        os.mkdir(d)
        self.made.append(d)
        if self.kind == "v2":
            self.write(d, "memory.max", cap_bytes)
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                self.write(d, "memory.swap.max", 0)
        else:
            self.write(d, "memory.limit_in_bytes", cap_bytes)
            if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                self.write(d, "memory.memsw.limit_in_bytes", cap_bytes)
        return d

    @staticmethod
    def write(d, name, value):
        with open(os.path.join(d, name), "w") as f:
            f.write(str(value))

    def oom_kills(self, d):
        """The cgroup's OOM kills (v1 kernels without that count: the times the cap was hit)."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        with open(os.path.join(d, name)) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        if self.kind == "v1":
            with open(os.path.join(d, "memory.failcnt")) as f:
                return int(f.read())
        return 0

    def peak(self, d):
        name = "memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"
        try:
            with open(os.path.join(d, name)) as f:
                return int(f.read())
        except OSError:
            return -1

    def remove(self):
        for d in reversed(self.made):
            try:
                os.rmdir(d)
            except OSError:
                pass


def enter(cg):
    # the shell moves itself into the cgroup, then becomes the worker: nothing is charged
    # elsewhere first
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cg]


def run(c, work, cgs, mode):
    dirs = [cgs.make("%s%d" % (mode, r), CAP_MIB << 20) for r in range(W)]
    args = ["--model", MODEL, "--data", "text:%s/t.txt,%s/v.txt" % (work, work),
            "--optimizer", "adamw", "--lr", "0.001", "--batch-size", "2", "--max-steps", "3",
            "--sharding", mode, "--backend", "cpu", "--checkpoint-dir", "", "--timeout", "60"]
    with Ranks(work, W, args, tag=mode, prefix=lambda r: enter(dirs[r])) as rk:
        codes = rk.wait(300)
        peaks = [cgs.peak(d) >> 20 for d in dirs]
        ooms = sum(cgs.oom_kills(d) for d in dirs)
        return codes, peaks, ooms, rk


def main():
    c = Checks("worker_memcap")
    if os.geteuid() != 0:
        print("SKIP worker_memcap: needs root to make memory cgroups")
        c.done()
        return
    work = tempdir("ddp-memcap-")
    cgs = None
    try:
        try:
            cgs = Cgroups("ddp-memcap-%d" % os.getpid())
        except OSError as e:
            print("SKIP worker_memcap: no memory cgroup can be made here (%s)" % e)
            c.done()
            return
        write_sentences(work + "/t.txt", 20000, 1)
        write_sentences(work + "/v.txt", 700, 2)
        codes, peaks, ooms, _ = run(c, work, cgs, "none")
        c.check("none under a %d MiB cap per rank: killed (exit codes %s, OOM kills %d, "
                "peaks %s MiB)" % (CAP_MIB, codes, ooms, peaks),
                -9 in codes and ooms > 0)
        # the others see the lost peer as such (6; 5 if it died before the group formed), the
        # codes the agent re-forms on: never a plain failure (1)
        c.check("none: the ranks not killed exit 6 or 5 (%s)" % codes,
                all(x in (-9, 5, 6) for x in codes))
        codes, peaks, ooms, rk = run(c, work, cgs, "full")
        out = rk.out(0)
        c.check("full at W=%d under the same cap: finished (exit codes %s, OOM kills %d, "
                "peaks %s MiB)" % (W, codes, ooms, peaks),
                codes == [0] * W and ooms == 0)
        c.check("full reported its validation", "val loss" in out)
        if codes != [0] * W:
            print(rk.logs())
    finally:
        if cgs:
            cgs.remove()
        shutil.rmtree(work, ignore_errors=True)
    c.done()


if __name__ == "__main__":
    sys.exit(main())
