"""ddp-agent's orphan timeout with a real ddpd: while ddpd is away longer than
--orphan-timeout, the agent stops its running workers (SIGTERM, then SIGKILL after the grace),
since their job has likely re-formed elsewhere; within the timeout it keeps them (the
reconnect test covers that). When ddpd is back the exits are reported and the job, which
still wanted them, restarts from its checkpoint. The same when ddpd's address answers every
beat with an error (a server that answers 500 in its place): an answer that is not 200
confirms nothing."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for, wait_pid_files  # noqa: E402

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


def start_two_workers(c):
    """An agent with --orphan-timeout ORPHAN_S and a RUNNING job of 2 workers on it;
    returns (job id, the workers' pid folder, their pids)."""
    c.start_agent("node-a", slots=2, extra=["--orphan-timeout", str(ORPHAN_S)])
    c.wait_nodes_ready(["node-a"])
    out = os.path.join(c.tmp, "pids")
    os.makedirs(out)
    job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "1",
                    "nproc_per_node": 2, "max_restarts": 1, "grace_period_s": 2})
    pids = [ps[0] for ps in wait_pid_files(out, 2)]
    c.wait_state(job["id"], "RUNNING", timeout=30)
    return job["id"], out, pids


def wait_given_up(c, pids, t0, since):
    """Waits (bounded) until the agent gave the workers up and they are gone, which must
    be no sooner than the orphan timeout after t0."""
    wait_for("the agent gives its workers up",
             lambda: "stopping 2 workers whose job cannot be confirmed"
             in c.log("agent-node-a.log"), timeout=ORPHAN_S + 15)
    wait_for("both workers gone", lambda: not any(pid_alive(p) for p in pids),
             timeout=2 + 10)
    gone = time.monotonic() - t0
    print("workers gone %.1f s after %s (orphan timeout %d s)" % (gone, since, ORPHAN_S))
    assert gone >= ORPHAN_S - 0.5, gone


def test_agent_stops_orphaned_workers():
    with cluster(node_timeout=3) as c:
        jid, out, pids = start_two_workers(c)
        t0 = time.monotonic()
        c.kill_ddpd()
        wait_given_up(c, pids, t0, "ddpd went away")

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


# In place of ddpd on its port: answers every request 500 (a replica whose store fails, a
# broken proxy), for at most 60 s.
ERRORS = r"""
import http.server, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = b'{"error":{"code":500,"status":"INTERNAL","message":"store failed"}}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = answer
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
threading.Timer(60, srv.shutdown).start()
srv.serve_forever()
"""


def test_agent_stops_workers_when_ddpd_answers_only_errors():
    """An answer is not a confirmation: with ddpd's address answering every beat 500, the
    agent gives its workers up after --orphan-timeout, as when nothing answers."""
    with cluster(node_timeout=3) as c:
        _, _, pids = start_two_workers(c)
        c.kill_ddpd()
        errors = subprocess.Popen([PY, "-c", ERRORS, str(c.port)])
        try:
            wait_given_up(c, pids, time.monotonic(), "ddpd began answering 500")
        finally:
            errors.kill()
            errors.wait(timeout=10)
        c.start_ddpd()  # ddpd back, so that the cluster stops as every test's does


if __name__ == "__main__":
    run_tests(globals())
