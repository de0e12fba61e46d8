"""Preemption notice end to end: real ddpd, real agents, real ddp-workers.

- honoured: a low-priority 1:3 job trains on 3 nodes; a priority-10 2-node job arrives; the
  low job's 3 workers get SIGUSR1 and a "preempt 20" line on DDP_CONTROL_FD, all stop after
  the same step, write a checkpoint at it and exit 10 (preempted) long before
  preempt_grace_s (20 s); the low job re-forms on 1 node with no restart charged and
  resumes at that very step; the events say who preempted whom, with the notice;
- ignored: a program submitted with `ddpctl submit --preempt-signal USR1 --preempt-grace 2`
  that ignores SIGUSR1 and SIGTERM (grace_period_s 2)
  still reads its "preempt 2" line, and is killed about preempt_grace_s + grace_period_s
  after the notice; the job re-forms at no restart's cost; preempted again and cancelled
  during the notice, it is stopped at once, not at the notice's end;
- relayed: SIGUSR1 to an agent (Slurm's --signal=B:USR1@T) reaches its workers: ddp-worker
  checkpoints and exits 10, and ddpd charges no restart for it.
Every wait is bounded.
"""
import os
import re
import signal
import time

import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from api_sim import cluster, run_tests  # noqa: E402
from cli_util import ctl  # noqa: E402
from cluster import BIN, wait_for  # noqa: E402

WORKER = os.path.join(BIN, "ddp-worker")
DATA = "synthetic:6000:784:10"


def epoch_of(c, jid):
    ms = c.get("/v1/jobs/%s/metrics" % jid).json["metrics"]
    return max([m["metric"].get("epoch", 0) for m in ms] or [0])


def lines(c, jid, rank):
    return [ln["text"] for ln in c.get("/v1/jobs/%s/logs?rank=%d&limit=10000" %
                                       (jid, rank)).json["lines"]]


def events(c, jid):
    return [e["reason"] for e in c.get("/v1/jobs/%s/events" % jid).json["events"]]


def test_notice_honoured_checkpoint_at_the_step():
    with cluster(node_timeout=10) as c:
        for n in ("a", "b", "c"):
            c.start_agent(n, slots=1)
        c.wait_nodes_ready(["a", "b", "c"])
        low = c.submit({"name": "low", "nnodes": "1:3", "max_restarts": 0, "grace_period_s": 5,
                        "preempt_grace_s": 20,
                        "command": [WORKER, "--epochs", "30", "--data", DATA,
                                    "--timeout", "20"]})
        assert low["spec"]["preempt_signal"] == "SIGUSR1", low
        c.wait_state(low["id"], "RUNNING", timeout=60)
        wait_for("low's epoch 1", lambda: epoch_of(c, low["id"]) >= 1, timeout=120)
        t0 = time.monotonic()
        high = c.submit({"name": "high", "nnodes": "2", "priority": 10, "grace_period_s": 5,
                         "command": [WORKER, "--epochs", "1", "--data", DATA,
                                     "--timeout", "20"]})
        j = wait_for("low shrunk to 1 node", lambda: (lambda j: j if j["generation"] == 2 and
                     j["state"] == "RUNNING" else None)(c.job(low["id"])), timeout=60)
        shrunk = time.monotonic() - t0
        assert len(j["nodes"]) == 1 and j["restarts"] == 0, j
        assert shrunk < 10, "the workers should exit on the notice, not at its end: %.1f" % shrunk
        steps = set()
        for r in range(3):
            m = wait_for("rank %d's checkpoint on the notice" % r, lambda: [
                x for x in (re.search(r"preempted: checkpoint at step (\d+)", t)
                            for t in lines(c, low["id"], r)) if x], timeout=30)
            steps.add(int(m[0].group(1)))
        assert len(steps) == 1, steps
        step = steps.pop()
        agent_logs = wait_for("3 exits 10 in the agents' logs", lambda: (lambda t: t if t.count(
            "code=10") >= 3 else None)("".join(c.log("agent-%s.log" % n) for n in "abc")),
            timeout=30)
        assert agent_logs.count("preemption notice to worker job=%s" % low["id"]) == 3, \
            agent_logs[-3000:]
        resumed = wait_for("low resumes at step %d" % step, lambda: [
            t for t in lines(c, low["id"], 0)
            if "resuming after epoch" in t and "step=%d " % step in t], timeout=60)
        ev = events(c, low["id"])
        assert any("preempted for %s (priority 10 > 0): shrinks" % high["id"] in e and
                   "notice SIGUSR1, stopped 20 s later" in e for e in ev), ev
        hev = events(c, high["id"])
        assert any("preempts %s (priority 0, shrinks)" % low["id"] in e for e in hev), hev
        print("notice honoured: submit of the high job to the low one running shrunk: %.2f s "
              "(preempt_grace_s 20); every rank checkpointed step %d and exited 10; resumed: %s"
              % (shrunk, step, resumed[0].strip()))
        for jid in (low["id"], high["id"]):
            c.post("/v1/jobs/%s:cancel" % jid)
        for jid in (low["id"], high["id"]):
            c.wait_state(jid, ("CANCELLED", "SUCCEEDED"), timeout=60)
        assert c.job(low["id"])["restarts"] == 0


def test_notice_ignored_stopped_after_both_graces():
    with cluster(node_timeout=10) as c:
        for n in ("a", "b"):
            c.start_agent(n, slots=1)
        c.wait_nodes_ready(["a", "b"])
        out = os.path.join(c.tmp, "ctl")
        os.makedirs(out)
        script = ('trap "" USR1 TERM; head -n 1 <&$DDP_CONTROL_FD > %s/$RANK-$DDP_GENERATION & '
                  'while :; do sleep 0.05; done' % out)
        # through ddpctl: its --preempt-signal (a name without SIG is canonicalised) and
        # --preempt-grace; a bad signal is a usage error before anything is sent
        r = ctl(c, "submit", "--name", "stubborn", "--nnodes", "1:2", "--max-restarts", "0",
                "--grace", "2", "--preempt-grace", "2", "--preempt-signal", "USR1",
                "--parsable", "--", "/bin/sh", "-c", script)
        assert r.rc == 0, r
        low = c.job(r.out.strip())
        assert low["spec"]["preempt_signal"] == "SIGUSR1", low["spec"]
        assert low["spec"]["preempt_grace_s"] == 2, low["spec"]
        r = ctl(c, "submit", "--preempt-signal", "SIGKILL", "--", "/bin/true")
        assert r.rc == 2 and "--preempt-signal" in r.err, r
        bad = c.post("/v1/jobs", {"command": ["/bin/true"], "preempt_signal": "SIGSTOP"})
        assert bad.status == 400 and "field 'preempt_signal'" in bad.text, bad
        c.wait_state(low["id"], "RUNNING", timeout=60)
        wait_for("both workers up", lambda: c.job(low["id"])["world_size"] == 2, timeout=30)
        time.sleep(0.5)  # let the shells install their traps
        t0 = time.monotonic()
        high = c.submit({"name": "high", "nnodes": "1", "priority": 10,
                         "command": ["/bin/sleep", "1"]})
        wait_for("stubborn re-formed on 1 node", lambda: (lambda j: j["generation"] == 2 and
                 j["state"] == "RUNNING")(c.job(low["id"])), timeout=30)
        took = time.monotonic() - t0
        # the notice (2 s), then SIGTERM, ignored, then SIGKILL after grace_period_s (2 s)
        assert 3.5 <= took < 9, took
        got = {}
        for f in os.listdir(out):
            with open(os.path.join(out, f)) as fh:
                got[f] = fh.read()
        assert got.get("0-1") == "preempt 2\n" and got.get("1-1") == "preempt 2\n", got
        j = c.job(low["id"])
        assert j["restarts"] == 0, j
        agent_logs = c.log("agent-a.log") + c.log("agent-b.log")
        assert "signal=9" in agent_logs, agent_logs[-2000:]
        print("notice ignored: stopped and re-formed %.2f s after the preempting submit "
              "(preempt_grace_s 2 + grace_period_s 2); restarts 0" % took)
        c.wait_state(high["id"], ("SUCCEEDED", "FAILED"), timeout=60)
        # grown back onto both nodes, shrunk again, and cancelled during the notice: the
        # agent does not wait out the notice, the stop comes at once
        wait_for("stubborn grown back to 2 nodes", lambda: (lambda j: j["state"] == "RUNNING"
                 and len(j["nodes"]) == 2)(c.job(low["id"])), timeout=30)
        time.sleep(0.5)
        top = c.submit({"name": "top", "nnodes": "1", "priority": 20,
                        "command": ["/bin/sleep", "1"]})
        wait_for("stubborn preempted again", lambda: c.job(low["id"])["state"] ==
                 "RESTARTING", timeout=30)
        # the cancel must come during the notice: once an agent has given it (a cancel that
        # reaches the agents with the preemption in one answer is a plain stop)
        gen = c.job(low["id"])["generation"]
        given = "preemption notice to worker job=%s generation=%d" % (low["id"], gen)
        wait_for("the notice given", lambda: given in c.log("agent-a.log") + c.log("agent-b.log"),
                 timeout=10)
        t1 = time.monotonic()
        c.post("/v1/jobs/%s:cancel" % low["id"])
        c.wait_state(low["id"], "CANCELLED", timeout=30)
        cancelled = time.monotonic() - t1
        logs = c.log("agent-a.log") + c.log("agent-b.log")
        assert "its notice was withdrawn" in logs, logs[-3000:]
        print("cancelled during its notice: CANCELLED %.2f s after the cancel (grace_period_s 2)"
              % cancelled)
        c.wait_state(top["id"], ("SUCCEEDED", "FAILED"), timeout=60)


def test_agent_relays_sigusr1():
    with cluster(node_timeout=10) as c:
        c.start_agent("a", slots=2)
        c.wait_nodes_ready(["a"])
        job = c.submit({"name": "slurm", "nproc_per_node": 2, "max_restarts": 0,
                        "command": [WORKER, "--epochs", "30", "--data", DATA,
                                    "--timeout", "20"]})
        c.wait_state(job["id"], "RUNNING", timeout=60)
        wait_for("epoch 1", lambda: epoch_of(c, job["id"]) >= 1, timeout=120)
        t0 = time.monotonic()
        c.agents["a"].send_signal(signal.SIGUSR1)
        j = wait_for("generation 2 after the relayed notice", lambda: (
            lambda j: j if j["generation"] == 2 and j["state"] == "RUNNING" else None)(
                c.job(job["id"])), timeout=30)
        took = time.monotonic() - t0
        assert j["restarts"] == 0, j
        assert "relayed a preemption notice to 2 workers" in c.log("agent-a.log")
        m = wait_for("rank 0's checkpoint line shipped", lambda: [
            x for x in (re.search(r"preempted: checkpoint at step (\d+)", t)
                        for t in lines(c, job["id"], 0)) if x], timeout=30)
        step = int(m[0].group(1))
        wait_for("resumed at step %d" % step, lambda: any(
            "resuming after epoch" in t and "step=%d " % step in t
            for t in lines(c, job["id"], 0)), timeout=60)
        ev = events(c, job["id"])
        assert any("exited 10 (preempted)" in e for e in ev), ev
        print("relayed SIGUSR1: generation 2 running %.2f s later, resumed at step %d, "
              "restarts 0" % (took, step))
        c.post("/v1/jobs/%s:cancel" % job["id"])
        c.wait_state(job["id"], "CANCELLED", timeout=60)


if __name__ == "__main__":
    run_tests(globals())
