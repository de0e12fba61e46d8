"""ddp-agent with several ddpd addresses, a real ddpd and fake replicas in front of it
(multi_util.py; they only redirect or refuse):

- node-a runs with --server DEAD,DDPD (nothing listens at DEAD): it registers with ddpd.
- node-b runs with --server FRONT,http://localhost:PORT, where FRONT answers every call with
  503 not_leader naming http://127.0.0.1:PORT (the same ddpd under another name, so that the
  leader is not one of node-b's addresses and node-b keeps beating FRONT first): it registers
  through FRONT (which saw the registration and the beats, with Authorization).
- A 2-node job runs on both. FRONT is killed mid-run: node-b moves on to localhost (its log
  says so) within its heartbeat interval and backoff; both nodes stay READY past ddpd's
  node timeout, the workers keep running in the same generation, and the job SUCCEEDS with
  no restart.
- A bad --server list is exit 2 naming the element, before anything starts.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import BIN, pid_alive, wait_for, wait_pid_files  # noqa: E402
from multi_util import Fronts, dead_url  # noqa: E402

PY = "/usr/bin/python3"
NODE_TIMEOUT = 4

# Runs until OUT/go exists (at most 120 s), then exits 0.
WORKER = r"""
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
end = time.monotonic() + 120
while time.monotonic() < end:
    if os.path.exists(os.path.join(out, "go")):
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def node_states(c):
    a = c.get("/v1/nodes")
    assert a.status == 200, a
    return {n["name"]: n["state"] for n in a.json["nodes"]}


def test_agent_moves_on_when_a_replica_stops():
    with cluster(node_timeout=NODE_TIMEOUT) as c, Fronts(c.tmp) as fronts:
        try:
            dead = dead_url()
            front = fronts.start("not_leader", c.url)
            other_name = "http://localhost:%d" % c.port
            c.start_agent("node-a", slots=1, extra=("--server", "%s,%s" % (dead, c.url)))
            c.start_agent("node-b", slots=1, extra=("--server", "%s,%s" % (front.url, other_name)))
            c.wait_nodes_ready(["node-a", "node-b"], timeout=30)
            wait_for("node-a registered with ddpd", lambda: "registered with ddpd server=%s " %
                     c.url in c.log("agent-node-a.log"), timeout=10)
            wait_for("node-b registered through the front", lambda: "registered with ddpd "
                     "server=%s " % front.url in c.log("agent-node-b.log"), timeout=10)
            seen = front.requests()
            assert any(q["path"] == "/v1/nodes:register" and q["auth"] for q in seen), seen
            assert any(q["path"].endswith(":heartbeat") for q in seen), seen

            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "2",
                            "nproc_per_node": 1, "max_restarts": 0})
            jid = job["id"]
            pids = [ps[0] for ps in wait_pid_files(out, 2)]
            before = c.wait_state(jid, "RUNNING", timeout=30)

            front.kill()
            t0 = time.monotonic()
            wait_for("node-b moves on to %s" % other_name, lambda: "ddpd answers at server=%s "
                     "now" % other_name in c.log("agent-node-b.log"), timeout=15)
            print("node-b moved on after %.1fs" % (time.monotonic() - t0))
            # Watched past ddpd's node timeout: a node whose beats stopped would be LOST.
            end = time.monotonic() + NODE_TIMEOUT + 2
            while time.monotonic() < end:
                st = node_states(c)
                assert st.get("node-a") == "READY" and st.get("node-b") == "READY", st
                assert all(pid_alive(p) for p in pids), "a worker died"
                time.sleep(0.2)
            j = c.job(jid)
            assert j["state"] == "RUNNING" and j["generation"] == before["generation"], j

            open(os.path.join(out, "go"), "w").close()
            done = c.wait_state(jid, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=60)
            assert done["state"] == "SUCCEEDED", done
            assert done["generation"] == before["generation"] and done["restarts"] == 0, done
        except BaseException:
            print("---- ddpd.log\n" + c.log("ddpd.log")[-3000:])
            for n in ("node-a", "node-b"):
                print("---- agent-%s.log\n%s" % (n, c.log("agent-%s.log" % n)[-4000:]))
            raise


def test_agent_refuses_a_bad_server_list():
    agent = os.path.join(BIN, "ddp-agent")
    for servers, want in (("http://127.0.0.1:1,ftp://127.0.0.1:2",
                           "element 2 'ftp://127.0.0.1:2'"),
                          ("http://127.0.0.1:1,,http://127.0.0.1:2", "element 2 is empty"),
                          ("http://127.0.0.1:99999", "port must be a number 1..65535"),
                          ("", None)):
        env = dict(os.environ)
        env.pop("DDP_SERVER", None)
        for how in ("flag", "env"):
            if servers == "" and how == "flag":
                argv = [agent, "--server", " "]
                want_now = "empty list"
            elif servers == "":
                continue  # an empty DDP_SERVER is the default address, as before
            else:
                argv = [agent] + (["--server", servers] if how == "flag" else [])
                want_now = want
            if how == "env":
                env["DDP_SERVER"] = servers
            p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=20)
            assert p.returncode == 2 and want_now in p.stderr, (argv, p.returncode, p.stderr)


if __name__ == "__main__":
    run_tests(globals())
