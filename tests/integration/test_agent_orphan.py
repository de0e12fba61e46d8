"""ddp-agent's orphan timeout with a real ddpd: while ddpd is away longer than
--orphan-timeout, the agent stops its running workers (SIGTERM, then SIGKILL after the grace),
since their job has likely re-formed elsewhere; within the timeout it keeps them (the
reconnect test covers that). When ddpd is back the exits are reported and the job, which
still wanted them, restarts from its checkpoint."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for  # noqa: E402

PY = "/usr/bin/python3"

# Writes its pid, then sleeps (at most 120 s).
WORKER = r"""
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.05)
"""

ORPHAN_S = 3


def test_agent_stops_orphaned_workers():
    with cluster(node_timeout=3) as c:
        c.start_agent("node-a", slots=2, extra=["--orphan-timeout", str(ORPHAN_S)])
        c.wait_nodes_ready(["node-a"])
        out = os.path.join(c.tmp, "pids")
        os.makedirs(out)
        job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "1",
                        "nproc_per_node": 2, "max_restarts": 1, "grace_period_s": 2})
        jid = job["id"]
        wait_for("2 workers running", lambda: len(
            [f for f in os.listdir(out) if f.endswith(".pid")]) == 2, timeout=60)
        pids = []
        for r in range(2):
            with open(os.path.join(out, "rank-%d.pid" % r)) as f:
                pids.append(int(f.read()))
        c.wait_state(jid, "RUNNING", timeout=30)

        t0 = time.monotonic()
        c.kill_ddpd()
        wait_for("the agent gives its workers up",
                 lambda: "stopping 2 workers whose job cannot be confirmed"
                 in c.log("agent-node-a.log"), timeout=ORPHAN_S + 15)
        wait_for("both workers gone", lambda: not any(pid_alive(p) for p in pids),
                 timeout=2 + 10)
        gone = time.monotonic() - t0
        print("workers gone %.1f s after ddpd went away (orphan timeout %d s)" % (gone, ORPHAN_S))
        assert gone >= ORPHAN_S - 0.5, gone

        for f in os.listdir(out):
            os.unlink(os.path.join(out, f))
        c.start_ddpd()
        wait_for("generation 2", lambda: c.job(jid)["generation"] == 2, timeout=40)
        j = c.job(jid)
        assert j["restarts"] == 1, j
        wait_for("generation 2's workers", lambda: len(
            [f for f in os.listdir(out) if f.endswith(".pid")]) == 2, timeout=60)
        a = c.post("/v1/jobs/%s:cancel" % jid)
        assert a.status == 200, a
        c.wait_state(jid, "CANCELLED", timeout=30)


if __name__ == "__main__":
    run_tests(globals())
