"""ddpctl driving real processes end to end: a real ddpd and two real ddp-agent processes
(node-a, node-b, 2 slots each, loopback; tests/integration/cluster.py), jobs whose command is a
small shell program, so every part but the training worker is the real one.

- A 2 x 2 job that prints its torchrun variables and has rank 0 write two metrics lines to
  DDP_METRICS_FD: `watch` (piped) shows both epochs and SUCCEEDED, `wait` exits 0, `logs`
  holds the four ranks' lines, `logs --rank 2` only rank 2's, `status` the two nodes with
  ranks 0-1 and 2-3.
- A sleeping job cancelled with `ddpctl cancel`: `logs -f` started before ends by itself,
  `wait` exits 1 with CANCELLED, and every worker pid is gone.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_sim  # noqa: E402
from api_sim import cluster  # noqa: E402
from cli_util import Background, ctl  # noqa: E402
from cluster import BIN, pid_alive, wait_for  # noqa: E402

ENV_SCRIPT = r'''
echo "env rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT"
if [ "$RANK" = 0 ]; then
  echo '{"epoch": 1, "epochs": 2, "loss": 0.75, "samples_per_s": 100.0}' >&"$DDP_METRICS_FD"
  sleep 0.3
  echo '{"epoch": 2, "epochs": 2, "loss": 0.5, "samples_per_s": 110.0}' >&"$DDP_METRICS_FD"
fi
sleep 0.5
'''

SLEEP_SCRIPT = r'''echo "pid $RANK $$"; exec sleep 300'''


def start_cluster():
    agent = os.path.join(BIN, "ddp-agent")
    if not os.access(agent, os.X_OK):
        raise AssertionError("ddp-agent not built: %s missing" % agent)
    cm = cluster(node_timeout=5)
    c = cm.__enter__()
    try:
        for n in ("node-a", "node-b"):
            c.start_agent(n, slots=2, extra=["--grace", "5"])
        c.wait_nodes_ready(["node-a", "node-b"], timeout=30)
    except BaseException:
        for n in ("node-a", "node-b"):
            print("agent %s log:\n%s" % (n, c.log("agent-%s.log" % n)[-2000:]))
        cm.__exit__(*sys.exc_info())
        raise
    return cm, c


def test_cli_agents_job_watch_wait_logs():
    cm, c = start_cluster()
    try:
        r = ctl(c, "submit", "--parsable", "--name", "envjob", "--nnodes", "2",
                "--nproc-per-node", "2", "--", "/bin/sh", "-c", ENV_SCRIPT)
        assert r.rc == 0, r
        jid = r.out.strip()
        watch = Background(c, "watch", jid)
        try:
            w = watch.finish(timeout=90)
        finally:
            watch.kill()
        assert w.rc == 0, w
        epochs = [ln.split()[:4] for ln in w.out.splitlines() if ln.startswith("epoch ")]
        assert epochs == [["epoch", "1/2", "loss", "0.7500"], ["epoch", "2/2", "loss", "0.5000"]], w
        assert w.out.splitlines()[-1].startswith("job %s SUCCEEDED" % jid), w
        r = ctl(c, "wait", jid, "--timeout", "30")
        assert r.rc == 0, r

        def all_lines():
            r = ctl(c, "logs", jid)
            assert r.rc == 0, r
            got = [ln for ln in r.out.splitlines() if " env rank=" in ln]
            return r if len(got) == 4 else None
        r = wait_for("4 ranks' env lines", all_lines, timeout=30, interval=0.5)
        for rank in range(4):
            want = "[rank %d] env rank=%d world=4 local=%d group=%d master=127.0.0.1:" % (
                rank, rank, rank % 2, rank // 2)
            assert any(ln.startswith(want) for ln in r.out.splitlines()), (want, r)
        r = ctl(c, "logs", jid, "--rank", "2")
        assert r.rc == 0 and r.out.startswith("env rank=2 world=4"), r
        r = ctl(c, "status", jid)
        assert r.rc == 0 and "state:       SUCCEEDED" in r.out, r
        assert "node-a       group rank 0, ranks 0-1" in r.out or \
            "node-b       group rank 0, ranks 0-1" in r.out, r
        assert "last:        epoch 2/2, loss 0.5000" in r.out, r
    finally:
        cm.__exit__(None, None, None)


def test_cli_agents_cancel_follow():
    cm, c = start_cluster()
    try:
        r = ctl(c, "submit", "--parsable", "--nnodes", "2", "--nproc-per-node", "2",
                "--grace", "5", "--", "/bin/sh", "-c", SLEEP_SCRIPT)
        assert r.rc == 0, r
        jid = r.out.strip()
        follow = Background(c, "logs", jid, "-f")
        waiter = Background(c, "wait", jid)
        try:
            for rank in range(4):
                follow.read_until("[rank %d] pid %d " % (rank, rank), timeout=60)
            text = follow.early.decode()
            pids = [int(ln.split()[-1]) for ln in text.splitlines() if "] pid " in ln]
            assert len(pids) == 4 and all(pid_alive(p) for p in pids), text
            r = ctl(c, "cancel", jid)
            assert r.rc == 0 and jid in r.out, r
            w = waiter.finish(timeout=60)
            assert w.rc == 1 and w.out.startswith("job %s CANCELLED" % jid), w
            f = follow.finish(timeout=30)
            assert f.rc == 0, f
            wait_for("worker pids gone", lambda: not any(pid_alive(p) for p in pids),
                     timeout=15)
        finally:
            follow.kill()
            waiter.kill()
    finally:
        cm.__exit__(None, None, None)


if __name__ == "__main__":
    api_sim.run_tests(globals())
