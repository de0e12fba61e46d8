"""ddp-agent with a real ddpd: ddpd is killed (-9) while a 2 x 2 job runs and comes back a few
seconds later on the same DDP_HOME. The agents keep their workers running (same pids), say
once per outage that ddpd is unreachable, reconnect, and the job carries on in the same
generation to SUCCEEDED."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for, wait_pid_files  # noqa: E402

PY = "/usr/bin/python3"

# Runs until OUT/go exists (at most 120 s), then says so and exits 0.
WORKER = r"""
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
print("waiting for go", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    if os.path.exists(os.path.join(out, "go")):
        print("done", flush=True)
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""

OUTAGE_S = 3


def test_agent_keeps_workers_while_ddpd_is_away():
    with cluster(node_timeout=3) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.start_agent("node-b", slots=2)
            c.wait_nodes_ready(["node-a", "node-b"])
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "2",
                            "nproc_per_node": 2, "max_restarts": 0})
            jid = job["id"]
            pids = {r: ps[0] for r, ps in enumerate(wait_pid_files(out, 4))}
            before = c.wait_state(jid, "RUNNING", timeout=30)

            c.kill_ddpd()
            for n in ("node-a", "node-b"):
                wait_for("agent %s notices" % n,
                         lambda: "cannot reach ddpd" in c.log("agent-%s.log" % n), timeout=20)
            time.sleep(OUTAGE_S)  # the outage itself, not a wait for something
            assert all(pid_alive(p) for p in pids.values()), "a worker died during the outage"

            c.start_ddpd()
            c.wait_nodes_ready(["node-a", "node-b"], timeout=30)
            for n in ("node-a", "node-b"):
                wait_for("agent %s reconnects" % n,
                         lambda: "reachable again" in c.log("agent-%s.log" % n), timeout=20)
                log = c.log("agent-%s.log" % n)
                # Logged once per outage, not once per try.
                assert log.count("cannot reach ddpd") == 1, log
            assert all(pid_alive(p) for p in pids.values()), "a worker died at the reconnect"
            j = c.job(jid)
            assert j["state"] == "RUNNING" and j["generation"] == before["generation"], j

            open(os.path.join(out, "go"), "w").close()
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            assert done["generation"] == before["generation"] and done["restarts"] == 0, done
            for r in range(4):
                a = c.get("/v1/jobs/%s/logs?rank=%d" % (jid, r))
                texts = [ln["text"] for ln in a.json["lines"]]
                assert "[rank %d] waiting for go" % r in texts and "[rank %d] done" % r in texts, \
                    texts
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            for n in ("node-a", "node-b"):
                print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))
            raise


def test_agent_registers_again_when_ddpd_forgets_it():
    """ddpd comes back without its database: the agent's beats get 404, it registers
    again (same incarnation) and its node is READY."""
    with cluster(node_timeout=3) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            c.kill_ddpd()
            for f in os.listdir(c.home):
                if f.startswith("ddp.db"):
                    os.unlink(os.path.join(c.home, f))
            c.start_ddpd()
            c.wait_nodes_ready(["node-a"], timeout=30)
            # the agent logs its registration after ddpd answered it, so READY may come first
            wait_for("the agent's second registration in its log",
                     lambda: c.log("agent-node-a.log").count("registered with ddpd") == 2,
                     timeout=10)
            log = c.log("agent-node-a.log")
            assert "registering again" in log, log
            assert log.count("registered with ddpd") == 2, log
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            print("---- agent-node-a.log\n" + c.log("agent-node-a.log")[-4000:])
            raise


def test_agent_registers_again_after_409():
    """Without the node's credential nobody takes a live node's name (409 ALREADY_EXISTS, the
    agent beats on undisturbed). With it (read from the agent's own credential file, as a
    second agent started with the same --name and --work-dir would), another incarnation takes
    the name; the agent's next beat is refused, it registers again with its own incarnation
    once ddpd lets it (the stale credential waits for the intruder's node to be LOST) and
    beats on."""
    with cluster(node_timeout=3) as c:
        try:
            c.start_agent("node-a", slots=2)
            c.wait_nodes_ready(["node-a"])
            reg = {"name": "node-a", "address": "127.0.0.1", "slots": 2,
                   "port_range": "30000-30010", "incarnation": "0" * 32}
            a = c.post("/v1/nodes:register", reg, token="agent")
            assert a.status == 409 and a.json["error"]["status"] == "ALREADY_EXISTS", a
            assert "registered and up" in a.json["error"]["message"], a
            time.sleep(1.5)
            assert c.log("agent-node-a.log").count("registered with ddpd") == 1
            cred_file = os.path.join(c.tmp, "agent-node-a", "node.credential")
            assert oct(os.stat(cred_file).st_mode & 0o777) == "0o600", os.stat(cred_file)
            reg["credential"] = open(cred_file).read().strip()
            a = c.post("/v1/nodes:register", reg, token="agent")
            assert a.status == 200, a
            wait_for("the agent registers again",
                     lambda: "registering again" in c.log("agent-node-a.log"), timeout=20)
            wait_for("its own registration back",
                     lambda: c.log("agent-node-a.log").count("registered with ddpd") == 2,
                     timeout=30)
            c.wait_nodes_ready(["node-a"])
            nodes = c.get("/v1/nodes").json["nodes"]
            assert [n["port_range"] for n in nodes if n["name"] == "node-a"] != ["30000-30010"]
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-4000:])
            print("---- agent-node-a.log\n" + c.log("agent-node-a.log")[-4000:])
            raise


if __name__ == "__main__":
    run_tests(globals())
