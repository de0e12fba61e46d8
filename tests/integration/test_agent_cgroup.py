"""ddp-agent's job cgroups with a real ddpd, for every cgroup hierarchy this machine lets root
write (v2, v1 freezer, v1 pids; each forced with --cgroup): a worker that detaches a
grandchild into a session of its own (double fork + setsid, so the process group stop cannot
reach it).
1. Cancel: the detached grandchild is gone within the grace plus a bound, and the job's cgroup
   folder is removed.
2. kill -9 of the agent: its workers die with it (PDEATHSIG), the grandchild lives on under
   init; a new agent with the same name and work dir kills it at its start and removes the
   stale job cgroup.
Skipped (exit 77, saying why) when not root or no hierarchy is writable."""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cluster import pid_alive, wait_for, wait_pid_files  # noqa: E402

PY = "/usr/bin/python3"
GRACE = 2

# Detaches a grandchild (own session, at most 300 s of life), writes "PID GRANDCHILD" to
# OUT/rank-R.pid, then sleeps (at most 120 s).
WORKER = r"""
import os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(r)
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        end = time.monotonic() + 300
        while time.monotonic() < end:
            time.sleep(0.2)
        os._exit(0)
    os._exit(0)
os.close(w)
grandchild = int(os.read(r, 32))
os.close(r)
os.waitpid(child, 0)
tmp = os.path.join(out, ".%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write("%d %d" % (os.getpid(), grandchild))
os.rename(tmp, os.path.join(out, "rank-%s.pid" % rank))
print("detached %d" % grandchild, flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.05)
"""

MOUNTS = [("v2", "/sys/fs/cgroup", "cgroup.controllers"),
          ("v2", "/sys/fs/cgroup/unified", "cgroup.controllers"),
          ("freezer", "/sys/fs/cgroup/freezer", None),
          ("pids", "/sys/fs/cgroup/pids", None)]


def writable_kinds():
    """The hierarchies where root may make a cgroup here, each once ([] when not root)."""
    if os.geteuid() != 0:
        return [], "not root (uid %d): the agent runs without cgroups" % os.geteuid()
    kinds, why = [], []
    for kind, mnt, marker in MOUNTS:
        if kind in kinds:
            continue
        if marker and not os.path.exists(os.path.join(mnt, marker)):
            why.append("%s: no %s" % (mnt, marker))
            continue
        probe = os.path.join(mnt, "ddp-test-probe-%d" % os.getpid())
        try:
            os.mkdir(probe)
            os.rmdir(probe)
            kinds.append(kind)
        except OSError as e:
            why.append("%s: %s" % (mnt, e))
    return kinds, "; ".join(why) or "no cgroup hierarchy mounted"


def parent_of(c, name, kind):
    """The parent cgroup the agent says it uses ("job cgroups: KIND in PATH")."""
    m = wait_for("agent %s names its cgroups" % name, lambda: re.search(
        r"job cgroups: (\S+) in (\S+)", c.log("agent-%s.log" % name)), timeout=20)
    assert m.group(1) == kind, c.log("agent-%s.log" % name)
    return m.group(2)


def read_pids(out, n):
    return dict(enumerate(wait_pid_files(out, n, "%d workers detached their grandchild")))


def procs_of(path):
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return {int(x) for x in f.read().split()}
    except OSError:
        return set()


def cleanup(pids):
    """What the test leaves behind when it fails: the grandchildren (Cluster.stop removes the
    empty cgroups)."""
    for p in pids:
        if pid_alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def stop_agent_cleanly(c, parent):
    """SIGTERM: the agent exits 0 and removes its parent cgroup."""
    agent = c.agents["node-a"]
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=30) == 0, c.log("agent-node-a.log")
    assert not os.path.exists(parent), (parent, os.listdir(parent))


def dump(c):
    print("---- ddpd.log\n" + c.log("ddpd.log")[-3000:])
    print("---- agent-node-a.log\n" + c.log("agent-node-a.log")[-5000:])


def cancel_kills_detached(kind):
    leftover = []
    with cluster(node_timeout=5) as c:
        try:
            c.start_agent("node-a", slots=2, extra=["--cgroup", kind])
            c.wait_nodes_ready(["node-a"])
            parent = parent_of(c, "node-a", kind)
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "1",
                            "nproc_per_node": 2, "max_restarts": 0, "grace_period_s": GRACE})
            jid = job["id"]
            pids = read_pids(out, 2)
            leftover = [p for ps in pids.values() for p in ps]
            detached = [ps[1] for ps in pids.values()]
            c.wait_state(jid, "RUNNING", timeout=30)
            job_cg = os.path.join(parent, "job-%s-g1" % jid)
            assert set(leftover) <= procs_of(job_cg), (leftover, procs_of(job_cg))
            for w, d in pids.values():  # out of reach of the stop of the worker's group
                assert os.getsid(d) != os.getsid(w) and os.getpgid(d) != w, (w, d)

            t0 = time.monotonic()
            a = c.post("/v1/jobs/%s:cancel" % jid)
            assert a.status == 200, a
            wait_for("the detached grandchildren gone",
                     lambda: not any(pid_alive(p) for p in detached), timeout=GRACE + 10)
            print("%s: detached processes gone %.2f s after the cancel (grace %d s)"
                  % (kind, time.monotonic() - t0, GRACE))
            wait_for("the job cgroup removed", lambda: not os.path.exists(job_cg), timeout=10)
            assert not any(pid_alive(p) for p in leftover), leftover
            done = c.wait_state(jid, ("CANCELLED",), timeout=30)
            assert done["state"] == "CANCELLED", done
            log = c.log("agent-node-a.log")
            assert re.search(r"killed 2 processes left in the cgroup of job=%s generation=1 "
                             % jid, log), log
            stop_agent_cleanly(c, parent)
        except BaseException:
            dump(c)
            raise
        finally:
            cleanup(leftover)


def kill9_then_new_agent_kills_detached(kind):
    leftover = []
    with cluster(node_timeout=3) as c:
        try:
            victim = c.start_agent("node-a", slots=2, extra=["--cgroup", kind])
            c.wait_nodes_ready(["node-a"])
            parent = parent_of(c, "node-a", kind)
            out = os.path.join(c.tmp, "pids")
            os.makedirs(out)
            job = c.submit({"command": [PY, "-c", WORKER, out], "nnodes": "1",
                            "nproc_per_node": 2, "max_restarts": 0, "grace_period_s": GRACE})
            jid = job["id"]
            pids = read_pids(out, 2)
            leftover = [p for ps in pids.values() for p in ps]
            workers = [ps[0] for ps in pids.values()]
            detached = [ps[1] for ps in pids.values()]
            c.wait_state(jid, "RUNNING", timeout=30)
            job_cg = os.path.join(parent, "job-%s-g1" % jid)

            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            wait_for("the workers gone with their agent",
                     lambda: not any(pid_alive(p) for p in workers), timeout=10)
            # What today's agent cannot reach: the grandchildren live on, in the cgroup.
            assert all(pid_alive(p) for p in detached), detached
            assert set(detached) <= procs_of(job_cg), (detached, procs_of(job_cg))

            t0 = time.monotonic()
            c.start_agent("node-a", slots=2, extra=["--cgroup", kind])
            wait_for("the detached grandchildren gone",
                     lambda: not any(pid_alive(p) for p in detached), timeout=20)
            print("%s: detached processes of the killed agent gone %.2f s after the new "
                  "agent's start" % (kind, time.monotonic() - t0))
            wait_for("the stale job cgroup removed", lambda: not os.path.exists(job_cg),
                     timeout=10)
            log = c.log("agent-node-a.log")
            assert "removed 1 job cgroups a previous agent left, killing 2 processes" in log, log
            c.wait_nodes_ready(["node-a"], timeout=30)
            # a restarted node is no failure of the job's: generation 2, no restart charged
            j = wait_for("generation 2 running", lambda: (lambda j: j if j["state"] == "RUNNING"
                         and j["generation"] == 2 else None)(c.job(jid)), timeout=60)
            assert j["restarts"] == 0, j
            assert c.post("/v1/jobs/%s:cancel" % jid).status == 200
            c.wait_state(jid, ("CANCELLED",), timeout=60)
            stop_agent_cleanly(c, parent)
        except BaseException:
            dump(c)
            raise
        finally:
            cleanup(leftover)


KINDS, WHY = writable_kinds()


def test_agent_cgroup_cancel_kills_detached():
    for kind in KINDS:
        cancel_kills_detached(kind)


def test_agent_cgroup_kill9_then_restart_kills_detached():
    for kind in KINDS:
        kill9_then_new_agent_kills_detached(kind)


if __name__ == "__main__":
    if not KINDS:
        print("SKIP: no writable cgroup hierarchy: %s" % WHY)
        sys.exit(77)
    print("cgroup hierarchies tested: %s" % ", ".join(KINDS))
    run_tests(globals())
