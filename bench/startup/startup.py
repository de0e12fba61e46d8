#!/usr/bin/python3
"""startup.py - bench/startup: from submit to every rank in its first training step, ours
against torchrun, for the 4-rank local job. Run it through bench/startup/run.sh.

Ours: a temporary cluster (a real ddpd on a temp SQLite file and two real ddp-agents with 2
slots each on loopback, tests/integration/cluster.py) is started once and left idle with both
nodes READY; then each repetition runs
    ddpctl submit --nnodes 2 --nproc-per-node 2 -- ddp-worker --epochs 1 --max-steps 1
(the main job: MLP 784-256-128-10 on Fashion-MNIST, batch 32 per rank) and measures, from
just before ddpctl starts (time.time_ns(), wall clock of this host):
  - submit: ddpctl has returned (the job is stored);
  - ready:  the latest rank's "process group ready" log line (its log file, ms resolution);
  - first step: the latest rank's end of its first optimizer step: the mtime of its
    DDP_HEARTBEAT_FILE (<agent work dir>/jobs/<job>/gen-1/rank-R.heartbeat), which the runtime
    touches after every step and only then (one step here, so the mtime is that step's end).
Peer: `torchrun --standalone --nproc_per_node 4 --redirects 1 --tee 1 --log_dir DIR
bench/peers/torch_ddp.py --max-steps 1 --first-step-dir D` (the same MLP, data and batch; each
rank writes time.time_ns() at the end of its first optimizer step), from just before torchrun
starts. Debian's torchrun (PyTorch 1.13) crashes with its default log redirection, hence the
--redirects/--tee/--log_dir flags.

The two alternate, REPS repetitions each; the table gives medians (the host is shared and
noisy) and the ratio ours / torchrun (goal: <= 0.5).
"""
import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import cluster  # noqa: E402  (the shared harness; BIN from $DDP_BIN)


def log_time_ns(path, needle):
    """Wall time (ns) of the first line of a worker log holding `needle`, or None.
    Lines start with 2026-11-29T13:58:16.123Z (common/log.h)."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if needle in line:
                    ts = line.split()[0]
                    dt = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
                    return int(dt.replace(tzinfo=timezone.utc).timestamp() * 1e6) * 1000
    except (OSError, ValueError, IndexError):
        return None
    return None


def wait_done(c, job_id, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = c.job(job_id)
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return j
        time.sleep(0.2)
    raise AssertionError("job %s not finished after %ss" % (job_id, timeout))


def ours_once(c, ctl, worker, work_dirs):
    t0 = time.time_ns()
    out = subprocess.run([ctl, "--server", c.url, "--token-file",
                          os.path.join(c.home, "user.token"), "submit", "--parsable",
                          "--name", "startup", "--nnodes", "2", "--nproc-per-node", "2", "--",
                          worker, "--epochs", "1", "--max-steps", "1"],
                         capture_output=True, text=True, timeout=60)
    t_sub = time.time_ns()
    if out.returncode != 0:
        raise AssertionError("ddpctl submit failed: %s" % out.stderr)
    job_id = out.stdout.strip()
    j = wait_done(c, job_id, 120)
    if j["state"] != "SUCCEEDED":
        raise AssertionError("job %s ended %s: %s" % (job_id, j["state"], j))
    first, ready = {}, {}
    for w in work_dirs:
        for hb in glob.glob(os.path.join(w, "jobs", job_id, "gen-*", "rank-*.heartbeat")):
            r = int(os.path.basename(hb)[5:-10])
            first[r] = os.stat(hb).st_mtime_ns
            ready[r] = log_time_ns(hb[:-10] + ".log", "process group ready")
    if sorted(first) != [0, 1, 2, 3] or None in ready.values():
        raise AssertionError("job %s: heartbeats/logs of ranks %s only" % (job_id, sorted(first)))
    return {"submit": (t_sub - t0) / 1e6, "ready": (max(ready.values()) - t0) / 1e6,
            "first": (max(first.values()) - t0) / 1e6}


def torch_once(script, torchrun):
    with tempfile.TemporaryDirectory(prefix="ddp-startup-") as d:
        logs, marks = os.path.join(d, "logs"), os.path.join(d, "first")
        os.makedirs(marks)
        t0 = time.time_ns()
        # Its own process group, so that a timeout kills torchrun's ranks too.
        p = subprocess.Popen([torchrun, "--standalone", "--nproc_per_node", "4", "--redirects",
                              "1", "--tee", "1", "--log_dir", logs, script, "--epochs", "1",
                              "--max-steps", "1", "--first-step-dir", marks],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            _, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise AssertionError("torchrun: no end after 300 s")
        t_end = time.time_ns()
        if p.returncode != 0:
            raise AssertionError("torchrun failed (%d): %s" % (p.returncode, err[-2000:]))
        times = []
        for r in range(4):
            with open(os.path.join(marks, "rank-%d" % r)) as f:
                times.append(int(f.read().strip()))
        return {"first": (max(times) - t0) / 1e6, "exit": (t_end - t0) / 1e6}


def main():
    ap = argparse.ArgumentParser(description="bench/startup: submit to first step")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torchrun", default="/usr/bin/torchrun")
    args = ap.parse_args()
    ctl = os.path.join(cluster.BIN, "ddpctl")
    worker = os.path.join(cluster.BIN, "ddp-worker")
    script = os.path.join(REPO, "bench", "peers", "torch_ddp.py")
    ours, peer = [], []
    with cluster.Cluster() as c:
        for name in ("node-a", "node-b"):
            c.start_agent(name, slots=2)
        c.wait_nodes_ready(["node-a", "node-b"])
        work_dirs = [os.path.join(c.tmp, "agent-" + n) for n in ("node-a", "node-b")]
        # One unmeasured run each: page cache (binaries, torch's libraries, the data set).
        ours_once(c, ctl, worker, work_dirs)
        torch_once(script, args.torchrun)
        for i in range(args.reps):
            ours.append(ours_once(c, ctl, worker, work_dirs))
            peer.append(torch_once(script, args.torchrun))
            print("# rep %d: ours %.0f ms, torchrun %.0f ms" % (i + 1, ours[-1]["first"],
                                                             peer[-1]["first"]),
                  file=sys.stderr)

    def med(rows, k):
        return statistics.median(r[k] for r in rows)

    print("# start-up of the 4-rank local job (2 nodes x 2 ranks on 127.0.0.1; main MLP on "
          "Fashion-MNIST, batch 32/rank), %d reps, medians (ms)" % args.reps)
    print("%-34s %10s %10s %12s" % ("system", "submit", "ready", "first_step"))
    print("%-34s %10.0f %10.0f %12.0f" % ("ours: ddpctl submit -> ddp-worker", med(ours, "submit"),
                                          med(ours, "ready"), med(ours, "first")))
    print("%-34s %10s %10s %12.0f" % ("torchrun --standalone + torch DDP", "-", "-",
                                      med(peer, "first")))
    ratio = med(ours, "first") / med(peer, "first")
    print("# ratio ours / torchrun (first step): %.2fx (goal <= 0.50x)" % ratio)
    print("# each: ours %s; torchrun %s" % (
        " ".join("%.0f" % r["first"] for r in ours), " ".join("%.0f" % r["first"] for r in peer)))
    print("# submit: ddpctl returned; ready: latest rank's 'process group ready' log line; "
          "first_step: latest rank's end of its first optimizer step")
    print("# %d cores, load average %s" % (os.cpu_count(),
                                           " ".join(open("/proc/loadavg").read().split()[:3])))


if __name__ == "__main__":
    main()
