"""Helpers for ddp-worker's integration tests: start W ranks as real processes with the
torchrun environment set by hand (MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK, GROUP_RANK, ...), wait for them with a deadline, and always stop
them (process groups, SIGKILL) even when a test fails.
"""
import array
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("DDP_BIN") or os.path.join(REPO, "build", "bin")
WORKER = os.path.join(BIN, "ddp-worker")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """W ranks of one job; nodes ranks-per-node groups (GROUP_RANK), each node with its own
    checkpoint dir when ckpt_dirs is given (a list, one per node); prefix(rank), when given,
    is an argv the worker's runs under (e.g. a shell that enters a cgroup, then execs it)."""

    def __init__(self, workdir, world, args, nodes=1, ckpt_dirs=None, env=None, port=None,
                 tag="run", prefix=None):
        self.workdir = workdir
        self.world = world
        self.procs = []
        self.tag = tag
        self.port = port or free_port()
        per_node = world // nodes
        for r in range(world):
            e = dict(os.environ)
            for k in ("RANK", "WORLD_SIZE", "DDP_CHECKPOINT_DIR", "DDP_METRICS_FD",
                      "DDP_HEARTBEAT_FILE"):
                e.pop(k, None)
            e.update({
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port),
                "RANK": str(r), "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(r % per_node), "LOCAL_WORLD_SIZE": str(per_node),
                "GROUP_RANK": str(r // per_node), "GROUP_WORLD_SIZE": str(nodes),
                "OMP_NUM_THREADS": "1", "DDP_LOG_LEVEL": "info",
            })
            if ckpt_dirs:
                e["DDP_CHECKPOINT_DIR"] = ckpt_dirs[r // per_node]
            if env:
                e.update(env(r) if callable(env) else env)
            # "{rank}" in --trace/--dump-params is ddp-worker's own to replace (docs/worker.md)
            argv = (prefix(r) if prefix else []) + [WORKER] + list(args)
            out = open(self.path(r, "out"), "wb")
            err = open(self.path(r, "err"), "wb")
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=err, env=e,
                                               start_new_session=True))
            out.close()
            err.close()

    def path(self, rank, kind):
        return os.path.join(self.workdir, "%s.rank%d.%s" % (self.tag, rank, kind))

    def out(self, rank):
        with open(self.path(rank, "out"), "r", errors="replace") as f:
            return f.read()

    def err(self, rank):
        with open(self.path(rank, "err"), "r", errors="replace") as f:
            return f.read()

    def wait(self, timeout):
        """Exit codes of all ranks (negative = signal); kills everything at the deadline."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            left = deadline - time.monotonic()
            try:
                codes.append(p.wait(timeout=max(left, 0.01)))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("%s: ranks still running after %.0f s\n%s" %
                                     (self.tag, timeout, self.logs()))
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def logs(self):
        parts = []
        for r in range(self.world):
            parts.append("--- rank %d stdout\n%s--- rank %d stderr\n%s" %
                         (r, self.out(r)[-2000:], r, self.err(r)[-3000:]))
        return "\n".join(parts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def run_ok(workdir, world, args, timeout=120, **kw):
    with Ranks(workdir, world, args, **kw) as rk:
        codes = rk.wait(timeout)
        if any(c != 0 for c in codes):
            raise AssertionError("%s: exit codes %s\n%s" % (rk.tag, codes, rk.logs()))
        return [rk.out(r) for r in range(world)], [rk.err(r) for r in range(world)]


def read_floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def rel_diff(a, b):
    """max |a-b| / max |b| and ||a-b|| / ||b||."""
    assert len(a) == len(b), (len(a), len(b))
    mx = max(abs(x - y) for x, y in zip(a, b))
    scale = max(abs(y) for y in b)
    num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    den = math.sqrt(sum(y * y for y in b))
    return mx / scale, num / den


class Checks:
    """Collects named checks; exits 1 with the failures listed."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.count = 0

    def check(self, what, cond, detail=""):
        self.count += 1
        if cond:
            print("ok   %s" % what, flush=True)
        else:
            print("FAIL %s %s" % (what, detail), flush=True)
            self.failed.append(what)

    def done(self):
        if self.failed:
            print("%s: %d of %d checks failed" % (self.name, len(self.failed), self.count))
            sys.exit(1)
        print("%s: all %d checks passed" % (self.name, self.count))


def write_sentences(path, nbytes, seed):
    """nbytes of sentences from a small vocabulary (a text for the GPT tests), from seed."""
    rnd = random.Random(seed)
    words = "the of a cat dog runs sleeps under over quick lazy brown red tree and".split()
    text = []
    while sum(len(s) for s in text) < nbytes:
        text.append(" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 9))) + ".\n")
    with open(path, "w") as f:
        f.write("".join(text)[:nbytes])


def tempdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def check_equivalence(c, work, args, batch, steps, caps, name=""):
    """DDP equivalence of a model: W = 2 and 4 ranks of batch B after `steps` steps give the
    parameters of one process of batch W*B (relative 1e-5), with overlap on (bucket cap
    caps[0]: several buckets) and off (caps[1]: one), every rank bit-identical; one process
    of batch B lands far off (the check can fail). name prefixes the checks and tags."""
    pre = name + "-" if name else ""
    lim = ["--max-steps", str(steps), "--epochs", "3"]
    refs = {}
    for w in (2, 4):
        dump = "%s/%sref%d.bin" % (work, pre, w)
        run_ok(work, 1, args + lim + ["--batch-size", str(w * batch), "--dump-params", dump],
               tag="%sref%d" % (pre, w))
        refs[w] = read_floats(dump)
    small = "%s/%ssmall.bin" % (work, pre)
    run_ok(work, 1, args + lim + ["--batch-size", str(batch), "--dump-params", small],
           tag=pre + "small")
    for w, overlap, cap in ((2, True, caps[0]), (4, True, caps[0]), (2, False, caps[1])):
        tag = "%sw%d-%s" % (pre, w, "ov" if overlap else "noov")
        dump = work + "/" + tag + ".rank{rank}.bin"
        a = args + lim + ["--batch-size", str(batch), "--bucket-cap-mb", cap, "--dump-params", dump]
        if not overlap:
            a.append("--no-overlap")
        _, errs = run_ok(work, w, a, tag=tag)
        nb = [l for l in errs[0].splitlines() if "buckets=" in l]
        buckets = int(nb[0].split("buckets=")[1].split()[0]) if nb else -1
        c.check("%s: %d buckets" % (tag, buckets), buckets >= 3 if overlap else buckets == 1)
        p0 = read_floats(dump.replace("{rank}", "0"))
        pl = read_floats(dump.replace("{rank}", str(w - 1)))
        c.check("%s: ranks 0 and %d bit-identical" % (tag, w - 1), p0 == pl)
        mx, nrm = rel_diff(p0, refs[w])
        c.check("%s: vs 1 process with batch %d: max rel %.2e, norm rel %.2e"
                % (tag, w * batch, mx, nrm), mx < 1e-5 and nrm < 1e-5)
    mx, _ = rel_diff(read_floats(small), refs[2])
    c.check("%sbatch %d vs %d differ (max rel %.2e): the check can fail"
            % (name + ": " if name else "", batch, 2 * batch, mx), mx > 1e-3)
