#!/usr/bin/python3
"""bench/attack/run.py - what strangers on loopback cost ddpd, a job's rendezvous store and a
rank's ring port: memory (VmRSS from /proc/PID/status) and latency, with real processes.

    bench/attack/run.py [--build BUILD_DIR] [--conns 1000] [--posts 300] [--silent 6]
                        [--reps 3] [--readme bench/attack/README.md]

(a) ddpd: a real ddpd on a temporary SQLite file (tests/integration/cluster.py). Its RSS and
    the latency of GET /healthz (median and max of 20 probes, a fresh connection each) idle;
    while it holds --conns idle TCP connections (connected, never a byte sent; counted by
    ddpd's threads, one per connection; 250 from each of 127.0.0.10, .11, ..., under ddpd's
    cap of 512 per address); and after --posts tokenless `POST /v1/jobs` whose
    headers announce a 1 MiB body that is never sent (each must be answered 401 from the
    headers alone; the connections are held open while it is measured).
(b) rank 0's store: ddp-worker as rank 0 of a 2-rank job (MASTER_ADDR 127.0.0.1), alone, so
    that its store waits for rank 1. Its RSS before and while it holds --conns connections
    that each sent all but the last byte of a hello-sized frame (the most a stranger may make
    it buffer before hello, 1,036 bytes); then rank 1 starts, and the time from its start to
    its `process group ready` line says whether and how fast it still joins.
(c) a rank's ring port: the same 2-rank job over the TCP ring (DDP_COMM_TRANSPORT=tcp, so
    rank 0 listens on its ring port before rank 1 exists); --silent connections that never
    say hello are opened to rank 0's ring port (found in /proc/net/tcp*), then rank 1 starts;
    the job's start time is from rank 1's start to the later `process group ready` line of
    the two ranks, against the same with no silent connection, --reps times alternating.

Prints a table; with --readme, replaces the block between the markers in that file with it.
Loopback only; every process it starts is stopped.
"""
import argparse
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

PER_SOURCE = 250  # idle connections to ddpd from one loopback address
HELLO_FRAME_MAX = 1036  # libddp/rdzv_wire.h: RDZV_HELLO_FRAME_MAX
MARK_BEGIN = "<!-- bench/attack/run.py: begin -->"
MARK_END = "<!-- bench/attack/run.py: end -->"


def status_field(pid, name):
    """A field of /proc/PID/status as an int (VmRSS in kB, Threads)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (name, pid))


def wait_for(what, fn, timeout=20.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError("timed out after %.0fs waiting for %s (last %r)" % (timeout, what, last))


def settled_threads(pid):
    """pid's thread count once it has not changed for 0.5 s (the threads of connections just
    closed are gone), at most 10 s."""
    last, since, deadline = None, time.monotonic(), time.monotonic() + 10
    while time.monotonic() < deadline:
        n = status_field(pid, "Threads")
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= 0.5:
            break
        time.sleep(0.05)
    return last


def listen_ports(pid):
    """The TCP ports process pid listens on (its socket inodes in /proc/net/tcp and tcp6)."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                p = line.split()
                if p[3] == "0A" and p[9] in inodes:
                    ports.add(int(p[1].rsplit(":", 1)[1], 16))
    return ports


def connect(port, host="127.0.0.1", src=None):
    s = socket.create_connection((host, port), timeout=5,
                                 source_address=(src, 0) if src else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def probe_healthz(port, n):
    """Latency (ms) of n GET /healthz, each on a fresh connection; every answer must be 200."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        s = connect(port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        out.append((time.perf_counter() - t0) * 1000)
        if not data.startswith(b"HTTP/1.1 200"):
            raise AssertionError("/healthz answered %r" % data[:80])
    return statistics.median(out), max(out)


def bench_ddpd(conns, posts, probes):
    import cluster  # the shared harness; BIN from $DDP_BIN
    rows = []
    with cluster.Cluster() as c:
        pid = c.ddpd.pid
        time.sleep(1.0)  # let the start settle (SQLite, the ticker)
        med, mx = probe_healthz(c.port, probes)
        rss0 = status_field(pid, "VmRSS")
        rows.append(("ddpd", "idle", rss0, "%.2f / %.2f" % (med, mx), ""))
        base_threads = settled_threads(pid)
        # ddpd takes at most 512 connections from one address (--max-connections-per-ip):
        # these come from 127.0.0.10, .11, ..., PER_SOURCE from each.
        held = [connect(c.port, src="127.0.0.%d" % (10 + i // PER_SOURCE)) for i in range(conns)]
        wait_for("ddpd to take %d connections" % conns,
                 lambda: status_field(pid, "Threads") >= base_threads + conns)
        time.sleep(0.5)
        rss1 = status_field(pid, "VmRSS")
        med, mx = probe_healthz(c.port, probes)
        rows.append(("ddpd", "%d idle TCP connections held" % conns, rss1,
                     "%.2f / %.2f" % (med, mx),
                     "%.1f kB a connection; threads %d -> %d"
                     % ((rss1 - rss0) / conns, base_threads, status_field(pid, "Threads"))))
        for s in held:
            s.close()
        wait_for("ddpd to drop them", lambda: status_field(pid, "Threads") <= base_threads)
        rss2 = status_field(pid, "VmRSS")
        head = (b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1048576\r\n\r\n")
        answered, took, held = 0, [], []
        for _ in range(posts):
            s = connect(c.port)
            t0 = time.perf_counter()
            s.sendall(head)
            status = s.recv(64)
            took.append((time.perf_counter() - t0) * 1000)
            if status.startswith(b"HTTP/1.1 401"):
                answered += 1
            held.append(s)
        time.sleep(0.5)
        rss3 = status_field(pid, "VmRSS")
        med, mx = probe_healthz(c.port, probes)
        rows.append(("ddpd", "after %d tokenless POSTs announcing 1 MiB" % posts, rss3,
                     "%.2f / %.2f" % (med, mx),
                     "%d/%d answered 401 in %.2f ms (median) without the body; RSS before "
                     "them %d kB" % (answered, posts, statistics.median(took), rss2)))
        for s in held:
            s.close()
        if answered != posts:
            raise AssertionError("%d of %d tokenless POSTs were not answered 401"
                                 % (posts - answered, posts))
    return rows


class Job:
    """Rank 0 (and later rank 1) of a 2-rank ddp-worker job on 127.0.0.1."""

    def __init__(self, bin_dir, tmp, tag, tcp):
        self.bin_dir, self.tmp, self.tag = bin_dir, tmp, tag
        import cluster
        self.port = cluster.free_port()
        self.env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(self.port), DDP_JOB_TOKEN="bench-attack-token-0123456789",
                        OMP_NUM_THREADS="1")
        if tcp:
            self.env["DDP_COMM_TRANSPORT"] = "tcp"
        self.procs, self.logs, self.t_start = [], [], []

    def start(self, rank):
        log = os.path.join(self.tmp, "%s-rank%d.log" % (self.tag, rank))
        env = dict(self.env, RANK=str(rank), LOCAL_RANK="0", GROUP_RANK=str(rank),
                   GROUP_WORLD_SIZE="2")
        argv = [os.path.join(self.bin_dir, "ddp-worker"), "--data", "synthetic:512:16:4",
                "--model", "mlp:16-16-4", "--epochs", "1", "--checkpoint-dir", "",
                "--timeout", "60"]
        self.t_start.append(time.time_ns())
        with open(log, "w") as f:
            self.procs.append(subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
        self.logs.append(log)
        return self.procs[-1]

    def ready_ns(self, rank):
        """Wall time (ns) of rank's `process group ready` line, or None."""
        with open(self.logs[rank], errors="replace") as f:
            for line in f:
                if "process group ready" in line:
                    dt = datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
                    return int(dt.replace(tzinfo=timezone.utc).timestamp() * 1e6) * 1000
        return None

    def finish(self, timeout=60):
        for p in self.procs:
            p.wait(timeout=timeout)
        rcs = [p.returncode for p in self.procs]
        if any(rcs):
            raise AssertionError("%s: ranks exited %s; rank 0's log:\n%s"
                                 % (self.tag, rcs, open(self.logs[0]).read()[-2000:]))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def store_once(bin_dir, tmp, tag, conns):
    """Rank 0's RSS waiting for rank 1, then holding conns partial frames; rank 1's join (ms)."""
    job = Job(bin_dir, tmp, tag, tcp=False)
    held = []
    try:
        r0 = job.start(0)
        wait_for("rank 0's store", lambda: job.port in listen_ports(r0.pid))
        time.sleep(0.5)
        rss0 = status_field(r0.pid, "VmRSS")
        partial = (HELLO_FRAME_MAX - 4).to_bytes(4, "little") + b"\x01" * (HELLO_FRAME_MAX - 5)
        for _ in range(conns):
            s = connect(job.port)
            s.sendall(partial)
            held.append(s)
        time.sleep(0.5)
        rss1 = status_field(r0.pid, "VmRSS")
        job.start(1)
        job.finish()
        return rss0, rss1, (job.ready_ns(1) - job.t_start[1]) / 1e6
    finally:
        for s in held:
            s.close()
        job.stop()


def bench_store(bin_dir, tmp, conns):
    _, rss_q, join_q = store_once(bin_dir, tmp, "store-quiet", 0)
    rss0, rss1, join = store_once(bin_dir, tmp, "store-held", conns)
    note = "rank 1 joined: its start to its `process group ready` %.0f ms"
    return [("rank 0's store", "waiting for rank 1, no stranger", rss_q, "", note % join_q),
            ("rank 0's store", "another job's, before the strangers", rss0, "", ""),
            ("rank 0's store", "%d connections, each %d of a %d-byte frame"
             % (conns, HELLO_FRAME_MAX - 1, HELLO_FRAME_MAX), rss1, "",
             "%.2f kB a connection; " % ((rss1 - rss0) / conns) + note % join)]


def job_start_ms(bin_dir, tmp, tag, silent):
    """Rank 1's start to the later `process group ready`, with `silent` connections to rank 0's
    ring port opened before rank 1 starts."""
    job = Job(bin_dir, tmp, tag, tcp=True)
    held = []
    try:
        r0 = job.start(0)
        ring = wait_for("rank 0's ring port",
                        lambda: sorted(listen_ports(r0.pid) - {job.port}))[0]
        held = [connect(ring) for _ in range(silent)]
        job.start(1)
        job.finish()
        return (max(job.ready_ns(0), job.ready_ns(1)) - job.t_start[1]) / 1e6
    finally:
        for s in held:
            s.close()
        job.stop()


def bench_ring(bin_dir, tmp, silent, reps):
    quiet, noisy = [], []
    for i in range(reps):
        quiet.append(job_start_ms(bin_dir, tmp, "quiet%d" % i, 0))
        noisy.append(job_start_ms(bin_dir, tmp, "silent%d" % i, silent))
    fmt = " ".join("%.0f" % x for x in quiet), " ".join("%.0f" % x for x in noisy)
    return [("a rank's ring port", "no stranger", None, "%.0f" % statistics.median(quiet),
             "job start (ms), each: %s" % fmt[0]),
            ("a rank's ring port", "%d silent connections" % silent, None,
             "%.0f" % statistics.median(noisy), "job start (ms), each: %s" % fmt[1])]


def table(rows):
    lines = ["%-18s %-48s %9s %13s  %s" % ("target", "state", "RSS (kB)", "latency (ms)",
                                            "notes")]
    for tgt, state, rss, lat, note in rows:
        lines.append(("%-18s %-48s %9s %13s  %s" % (tgt, state, "" if rss is None else rss, lat,
                                                     note)).rstrip())
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--posts", type=int, default=300)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--silent", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--readme", help="write the table into this file between its markers")
    a = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(a.build), "bin")
    os.environ["DDP_BIN"] = bin_dir
    for b in ("ddpd", "ddp-worker"):
        if not os.access(os.path.join(bin_dir, b), os.X_OK):
            sys.exit("no %s in %s: build first" % (b, bin_dir))
    need = 2 * max(a.conns, a.posts) + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("needs %d open files, the hard limit is %d" % (need, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))  # ddpd and the ranks too
    t0 = time.monotonic()
    rows = bench_ddpd(a.conns, a.posts, a.probes)
    with tempfile.TemporaryDirectory(prefix="ddp-attack-") as tmp:
        rows += bench_store(bin_dir, tmp, a.conns)
        rows += bench_ring(bin_dir, tmp, a.silent, a.reps)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    lines = table(rows)
    lines.append("# latency: ddpd, GET /healthz median / max of %d; ring, median of %d job starts "
                 "(rank 1's start to the later 'process group ready')" % (a.probes, a.reps))
    lines.append("# %d cores, load average %s, %.0f s, %s UTC"
                 % (os.cpu_count(), load, time.monotonic() - t0,
                    datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")))
    print("\n".join(lines))
    if a.readme:
        text = open(a.readme).read()
        i, j = text.index(MARK_BEGIN), text.index(MARK_END)
        block = MARK_BEGIN + "\n```\n" + "\n".join(lines) + "\n```\n"
        with open(a.readme, "w") as f:
            f.write(text[:i] + block + text[j:])


if __name__ == "__main__":
    main()
