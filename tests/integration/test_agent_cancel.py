"""ddp-agent with a real ddpd: cancelling a running 2 x 2 job. Every worker process (and the
child each one started in its process group) is gone within the grace period, checked by pid;
the job is CANCELLED and its logs are kept. One rank ignores SIGTERM: it is SIGKILLed once the
grace period is over, not before."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for, wait_pid_files  # noqa: E402

PY = "/usr/bin/python3"
GRACE = 4

# Writes "PID CHILDPID" to OUT/rank-R.pid, then runs (at most 120 s). On SIGTERM the rank
# named by argv[2] says so and carries on; the others say so and exit 0.
WORKER = r"""
import os, signal, subprocess, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
stubborn = rank == sys.argv[2]
def on_term(sig, frame):
    if stubborn:
        print("ignoring SIGTERM", flush=True)
    else:
        print("got SIGTERM, exiting", flush=True)
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
child = subprocess.Popen(["sleep", "120"])
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write("%d %d" % (os.getpid(), child.pid))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
print("running", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(1)
"""

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:(\d\d\.\d{3}))Z")


def log_time(line):
    """Seconds within the day of an agent log line (time of day is enough here)."""
    m = STAMP.match(line)
    hh, mm = int(line[11:13]), int(line[14:16])
    return hh * 3600 + mm * 60 + float(m.group(2))


def logs_of(c, job_id, rank):
    a = c.get("/v1/jobs/%s/logs?rank=%d&limit=1000" % (job_id, rank))
    assert a.status == 200, a
    return [ln["text"] for ln in a.json["lines"]]


def test_agent_cancel_stops_every_worker_within_grace():
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.start_agent("node-b", slots=2)
            c.wait_nodes_ready(["node-a", "node-b"])
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            stubborn = 3
            job = c.submit({"name": "cancelme", "command": [PY, "-c", WORKER, out,
                                                           str(stubborn)],
                            "nnodes": "2", "nproc_per_node": 2, "max_restarts": 0,
                            "grace_period_s": GRACE})
            jid = job["id"]
            pids = dict(enumerate(wait_pid_files(out, 4)))
            assert all(pid_alive(p) for ps in pids.values() for p in ps), pids
            c.wait_state(jid, "RUNNING", timeout=30)
            for r in range(4):
                wait_for("rank %d running line at ddpd" % r,
                         lambda: "[rank %d] running" % r in logs_of(c, jid, r), timeout=20)

            t0 = time.monotonic()
            a = c.post("/v1/jobs/%s:cancel" % jid)
            assert a.status == 200, a
            every = [p for ps in pids.values() for p in ps]
            # Within the grace period (plus what a slow shared machine adds to deliver
            # the cancel and the SIGKILL), every worker and its child is gone.
            wait_for("every worker pid gone", lambda: not any(pid_alive(p) for p in every),
                     timeout=GRACE + 10)
            took = time.monotonic() - t0
            print("all %d processes gone %.2fs after the cancel (grace %ds)"
                  % (len(every), took, GRACE))
            done = c.wait_state(jid, ("CANCELLED",), timeout=30)
            assert done["state"] == "CANCELLED", done

            # Logs are kept: the running lines and what each rank said on SIGTERM.
            for r in range(4):
                lines = logs_of(c, jid, r)
                assert "[rank %d] running" % r in lines, (r, lines)
                said = "ignoring SIGTERM" if r == stubborn else "got SIGTERM, exiting"
                wait_for("rank %d: %s" % (r, said),
                         lambda: "[rank %d] %s" % (r, said) in logs_of(c, jid, r), timeout=20)

            # The stubborn rank was killed by SIGKILL, not before the grace period was over;
            # the others exited on their own (code 0).
            node = [n["name"] for n in done["nodes"] if stubborn in n["ranks"]][0]
            log = c.log("agent-%s.log" % node).splitlines()
            stop = [ln for ln in log if "stopping worker" in ln and "rank=%d " % stubborn in ln]
            exit_ = [ln for ln in log if "worker exited" in ln and "rank=%d " % stubborn in ln]
            assert len(stop) == 1 and len(exit_) == 1, (stop, exit_)
            assert "signal=9" in exit_[0] and "grace=%ds" % GRACE in stop[0], (stop, exit_)
            waited = (log_time(exit_[0]) - log_time(stop[0])) % 86400  # midnight
            assert waited >= GRACE - 0.01, "SIGKILL came %.3fs after SIGTERM" % waited
            for r in range(4):
                if r == stubborn:
                    continue
                nd = [n["name"] for n in done["nodes"] if r in n["ranks"]][0]
                ex = [ln for ln in c.log("agent-%s.log" % nd).splitlines()
                      if "worker exited" in ln and "rank=%d " % r in ln]
                assert len(ex) == 1 and "code=0 signal=0" in ex[0], ex
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            for n in ("node-a", "node-b"):
                print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))
            raise


if __name__ == "__main__":
    run_tests(globals())
