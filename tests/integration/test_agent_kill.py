"""ddp-agent with a real ddpd: `kill -9` of an agent while a 2 x 2 job runs. Its workers die
with it (PR_SET_PDEATHSIG, checked by pid), ddpd marks the node LOST, and the job's
generation ends everywhere (the surviving node's workers are stopped; with max_restarts 0
the job FAILS). SIGTERM to an agent: it stops its workers, reports their exits to ddpd and
exits 0."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for, wait_pid_files  # noqa: E402

PY = "/usr/bin/python3"

WORKER = r"""
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
print("running", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(1)
"""


def node_state(c, name):
    for n in c.get("/v1/nodes").json["nodes"]:
        if n["name"] == name:
            return n["state"]
    return None


def test_agent_kill9_takes_its_workers_and_ends_the_generation():
    with cluster(node_timeout=2) as c:
        try:
            c.start_agent("node-a", slots=2)
            victim = c.start_agent("node-b", slots=2)
            c.wait_nodes_ready(["node-a", "node-b"])
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "2",
                            "nproc_per_node": 2, "max_restarts": 0, "grace_period_s": 3})
            jid = job["id"]
            wait_for("4 workers running", lambda: len(
                [f for f in os.listdir(out) if f.endswith(".pid")]) == 4, timeout=60)
            pids = {}
            for r in range(4):
                with open(os.path.join(out, "rank-%d.pid" % r)) as f:
                    pids[r] = int(f.read())
            j = c.wait_state(jid, "RUNNING", timeout=30)
            on_b = [r for n in j["nodes"] if n["name"] == "node-b" for r in n["ranks"]]
            on_a = [r for n in j["nodes"] if n["name"] == "node-a" for r in n["ranks"]]
            assert len(on_b) == 2 and len(on_a) == 2, j["nodes"]
            assert all(pid_alive(p) for p in pids.values()), pids

            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            wait_for("node-b's workers gone with their agent",
                     lambda: not any(pid_alive(pids[r]) for r in on_b), timeout=10)
            wait_for("node-b LOST", lambda: node_state(c, "node-b") == "LOST", timeout=30)
            # A lost node is no failure of the job's (max_restarts 0 is not spent): the job
            # waits for a second node, and says so.
            j = wait_for("the job waits for nodes", lambda: (lambda j: j if j["state"] ==
                         "RESTARTING" and j["pending"] else None)(c.job(jid)), timeout=60)
            assert j["pending"]["reason"] == "Resources" and j["restarts"] == 0, j
            assert "needs 2 nodes" in j["pending"]["message"], j
            ev = c.get("/v1/jobs/%s/events" % jid).json["events"]
            assert any("node-b" in e["reason"] for e in ev), ev
            # The generation ended everywhere: node-a's workers were stopped too.
            wait_for("node-a's workers stopped", lambda: not any(pid_alive(pids[r])
                                                                 for r in on_a), timeout=30)
            assert node_state(c, "node-a") == "READY"
            assert c.post("/v1/jobs/%s:cancel" % jid).status == 200
            c.wait_state(jid, ("CANCELLED",), timeout=30)
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            for n in ("node-a", "node-b"):
                print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))
            raise


def test_agent_sigterm_stops_workers_and_exits_0():
    with cluster(node_timeout=5) as c:
        try:
            agent = c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "1",
                            "nproc_per_node": 2, "max_restarts": 0, "grace_period_s": 5})
            jid = job["id"]
            pids = [ps[0] for ps in wait_pid_files(out, 2)]
            c.wait_state(jid, "RUNNING", timeout=30)
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=30) == 0
            assert not any(pid_alive(p) for p in pids), pids
            log = c.log("agent-node-a.log")
            assert log.count("signal=15") == 2 and "agent stopped" in log, log
            assert "Sanitizer" not in log and "runtime error" not in log, log
            # ddpd got the exits (SIGTERM is not success): the job ends.
            done = c.wait_state(jid, ("FAILED", "SUCCEEDED", "CANCELLED"), timeout=30)
            assert done["state"] == "FAILED", done
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            print("---- agent-node-a.log\n" + c.log("agent-node-a.log")[-4000:])
            raise


if __name__ == "__main__":
    run_tests(globals())
