"""ddpctl on running jobs, against a live ddpd with two simulated agents (register/heartbeat
from the test, api_sim.SimNode): nodes (table and json), status with nodes and ranks,
logs (all ranks, --rank, -o json, -f until the job ends), watch piped (one line per epoch
and per state change, ends with the final state; exit 0 iff SUCCEEDED) and wait's exit codes
(SUCCEEDED 0, FAILED 1, --timeout 1)."""
import json
import os
import pty
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_sim  # noqa: E402
from api_sim import Api, SimNode, cluster, wait_assigned, wait_for  # noqa: E402
from cli_util import CTL, Background, beat_until, ctl, ctl_env  # noqa: E402


def two_nodes(api):
    a, b = SimNode(api, "node-a", slots=2), SimNode(api, "node-b", slots=2)
    a.register()
    b.register()
    a.beat()
    b.beat()
    return a, b


def log(job_id, gen, rank, seq, *lines):
    return {"job_id": job_id, "generation": gen, "rank": rank, "seq": seq, "lines": list(lines)}


def metric(job_id, gen, seq, epoch, epochs, loss):
    return {"job_id": job_id, "generation": gen, "seq": seq,
            "metric": {"epoch": epoch, "epochs": epochs, "loss": loss, "test_acc": 0.5 + epoch / 10,
                       "samples_per_s": 1000.0 * epoch, "world_size": 4, "generation": gen,
                       "time_s": 0.5}}


def test_cli_nodes_status_logs_watch_wait_success():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a, b = two_nodes(api)
        r = ctl(c, "nodes", "-o", "json")
        assert r.rc == 0, r
        nodes = {n["name"]: n for n in json.loads(r.out)["nodes"]}
        assert set(nodes) == {"node-a", "node-b"}, nodes
        assert all(n["state"] == "READY" and n["slots"] == 2 for n in nodes.values()), nodes
        r = ctl(c, "nodes")
        assert r.rc == 0, r
        rows = {ln.split()[0]: ln.split() for ln in r.out.splitlines()[1:]}
        assert rows["node-a"][1:5] == ["127.0.0.1", "READY", "2", "0"], r

        r = ctl(c, "submit", "--parsable", "--nnodes", "2", "--nproc-per-node", "2", "--",
                "/bin/sh", "-c", "env")
        assert r.rc == 0, r
        jid = r.out.strip()
        # watch and logs -f follow the job from before its start, piped (not a terminal).
        watch = Background(c, "watch", jid)
        follow = Background(c, "logs", jid, "-f")
        try:
            wait_assigned(jid, [a, b])
            api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
            r = ctl(c, "nodes")
            rows = {ln.split()[0]: ln.split() for ln in r.out.splitlines()[1:]}
            assert rows["node-a"][4] == "2" and rows["node-b"][4] == "2", r  # USED
            r = ctl(c, "status", jid)
            assert r.rc == 0 and "state:       RUNNING" in r.out, r
            assert "world size:  4" in r.out, r
            assert "node-a       group rank 0, ranks 0-1" in r.out, r
            assert "node-b       group rank 1, ranks 2-3" in r.out, r
            assert "RUNNING" in r.out.split("events:")[1], r

            a.pending_logs = [log(jid, 1, 0, 1, "hello from 0", "second line of 0"),
                              log(jid, 1, 1, 1, "hello from 1")]
            a.pending_metrics = [metric(jid, 1, 1, 1, 3, 0.9)]
            b.pending_logs = [log(jid, 1, 3, 1, "hello from 3")]
            a.beat()
            b.beat()
            # Piped, each line comes out as it happens, not at the end.
            watch.read_until("epoch 1/3 loss 0.9000")
            follow.read_until("[rank 3] hello from 3")
            r = ctl(c, "logs", jid)
            assert r.rc == 0, r
            for want in ("[rank 0] hello from 0", "[rank 0] second line of 0",
                         "[rank 1] hello from 1", "[rank 3] hello from 3"):
                assert want in r.out.splitlines(), (want, r)
            assert r.out.index("hello from 0") < r.out.index("second line of 0"), r
            r = ctl(c, "logs", jid, "--rank", "1")
            assert r.rc == 0 and r.out == "hello from 1\n", r
            r = ctl(c, "logs", jid, "-o", "json")
            assert r.rc == 0, r
            texts = [ln["text"] for line in r.out.splitlines() for ln in json.loads(line)["lines"]]
            assert sorted(texts) == sorted(["hello from 0", "second line of 0", "hello from 1",
                                            "hello from 3"]), r
            r = ctl(c, "status", jid)
            assert "epoch 1/3, loss 0.9000" in r.out, r
            r = ctl(c, "list")
            assert "epoch 1/3 loss 0.9000" in r.out, r

            a.pending_metrics = [metric(jid, 1, 2, 2, 3, 0.6), metric(jid, 1, 3, 3, 3, 0.4)]
            a.pending_logs = [log(jid, 1, 0, 3, "last words of 0")]
            a.beat()
            assert watch.running() and follow.running()
            r = ctl(c, "wait", jid, "--timeout", "1")
            assert r.rc == 1 and "timed out after 1 s" in r.err, r
            a.exit_workers(jid, 0)
            b.exit_workers(jid, 0)
            beat_until([a, b], lambda: api.job(jid)["state"] == "SUCCEEDED", "SUCCEEDED")

            w = watch.finish(timeout=30)
            assert w.rc == 0, w
            lines = w.out.splitlines()
            epochs = [ln for ln in lines if ln.startswith("epoch ")]
            assert [ln.split()[:4] for ln in epochs] == [
                ["epoch", "1/3", "loss", "0.9000"], ["epoch", "2/3", "loss", "0.6000"],
                ["epoch", "3/3", "loss", "0.4000"]], w
            assert "\r" not in w.out and "\033" not in w.out, w  # no redraws when piped
            states = [ln.split()[1] for ln in lines if ln.startswith("state ")]
            assert states[0] in ("PENDING", "RUNNING") and states[-1] == "SUCCEEDED", w
            assert "RUNNING" in states, w
            assert lines[-1].startswith("job %s SUCCEEDED" % jid), w
            assert lines.index(epochs[-1]) < lines.index([ln for ln in lines
                                                          if ln.startswith("state SUCC")][0]), w
            assert "loss 0.4000" in lines[-1], w

            f = follow.finish(timeout=30)
            assert f.rc == 0, f
            assert "[rank 0] last words of 0" in f.out.splitlines(), f
            assert f.out.count("hello from 3") == 1, f
        finally:
            watch.kill()
            follow.kill()
        r = ctl(c, "wait", jid)
        assert r.rc == 0 and r.out.startswith("job %s SUCCEEDED" % jid), r
        r = ctl(c, "wait", jid, "-o", "json")
        assert r.rc == 0 and json.loads(r.out)["state"] == "SUCCEEDED", r
        # A finished job: watch replays its history in time order and ends at once.
        r = ctl(c, "watch", jid)
        assert r.rc == 0, r
        kinds = [ln.split()[0] + (" " + ln.split()[1] if ln.startswith("state") else "")
                 for ln in r.out.splitlines()]
        assert kinds[-4:] == ["epoch", "epoch", "state SUCCEEDED", "job"], r
        assert kinds.index("state RUNNING") < kinds.index("epoch"), r
        r = ctl(c, "watch", jid, "-o", "json")
        assert r.rc == 0, r
        docs = [json.loads(ln) for ln in r.out.splitlines()]
        assert docs[-1]["id"] == jid and docs[-1]["state"] == "SUCCEEDED", r
        assert any("metrics" in d and len(d["metrics"]) == 3 for d in docs), r


def test_cli_watch_wait_failed():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a, b = two_nodes(api)
        r = ctl(c, "submit", "--parsable", "--max-restarts", "0", "--", "/bin/false")
        jid = r.out.strip()
        assert r.rc == 0, r
        (x,) = wait_assigned(jid, [a])
        api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
        waiter = Background(c, "wait", jid)
        watch = Background(c, "watch", jid)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5 and waiter.running():
                time.sleep(0.1)  # gives wait a few polls on a RUNNING job
            assert waiter.running(), "wait ended before the job did"
            a.exit_workers(jid, 1)
            beat_until([a, b], lambda: api.job(jid)["state"] == "FAILED", "FAILED")
            w = waiter.finish(timeout=30)
            assert w.rc == 1 and w.out.startswith("job %s FAILED" % jid), w
            w = watch.finish(timeout=30)
            assert w.rc == 1, w
            assert w.out.splitlines()[-1].startswith("job %s FAILED" % jid), w
            assert any(ln.startswith("state FAILED") for ln in w.out.splitlines()), w
        finally:
            waiter.kill()
            watch.kill()


def asleep(proc):
    """True when proc sleeps between polls (so its first, impatient call is behind it)."""
    try:
        with open("/proc/%d/wchan" % proc.pid) as f:
            return "nanosleep" in f.read()
    except OSError:
        return False


def test_cli_follow_rides_out_ddpd_restart():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a, b = two_nodes(api)
        r = ctl(c, "submit", "--parsable", "--", "/bin/true")
        jid = r.out.strip()
        wait_assigned(jid, [a])
        api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
        waiter = Background(c, "wait", jid)
        watch = Background(c, "watch", jid)
        try:
            watch.read_until("state RUNNING")  # watch is past its first call
            # wait prints nothing until the end: its first call (the one that fails at once,
            # by design, when ddpd cannot be reached) is over once it sleeps between polls.
            t0 = time.monotonic()
            while not asleep(waiter.p) and waiter.running() and time.monotonic() - t0 < 20:
                time.sleep(0.01)
            assert asleep(waiter.p), "wait never went to sleep between polls"
            c.kill_ddpd()
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3:
                assert waiter.running() and watch.running(), (waiter.finish(1) if not waiter.running() else watch.finish(1))
                time.sleep(0.1)
            c.start_ddpd()
            a.exit_workers(jid, 0)
            beat_until([a, b], lambda: api.job(jid)["state"] == "SUCCEEDED", "SUCCEEDED")
            w = waiter.finish(timeout=30)
            assert w.rc == 0 and w.out.startswith("job %s SUCCEEDED" % jid), w
            assert "cannot reach ddpd at %s" % c.url in w.err and "retrying" in w.err, w
            assert "ddpd answers again" in w.err, w
            w = watch.finish(timeout=30)
            assert w.rc == 0 and "retrying" in w.err, w
            assert w.out.splitlines()[-1].startswith("job %s SUCCEEDED" % jid), w
        finally:
            waiter.kill()
            watch.kill()


def test_cli_restart_generations():
    """A rank fails once: watch shows RESTARTING and the second generation's RUNNING, the epoch
    lines of both generations, and logs mark where generation 2 begins."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a, b = two_nodes(api)
        r = ctl(c, "submit", "--parsable", "--nproc-per-node", "2", "--max-restarts", "1",
                "--", "/bin/true")
        jid = r.out.strip()
        watch = Background(c, "watch", jid)
        try:
            wait_for("assigned", lambda: (a.beat(), b.beat()) and
                     any(n.assignment(jid) for n in (a, b)), timeout=30, interval=0.1)
            node = a if a.assignment(jid) else b
            api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
            node.pending_logs = [log(jid, 1, 0, 1, "gen one")]
            node.pending_metrics = [metric(jid, 1, 1, 1, 2, 0.8)]
            node.beat()
            watch.read_until("epoch 1/2 loss 0.8000")
            node.exit_workers(jid, 1, ranks=[1])
            wait_assigned(jid, [node], generation=2)
            api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
            node.pending_logs = [log(jid, 2, 0, 1, "gen two")]
            node.pending_metrics = [metric(jid, 2, 1, 2, 2, 0.6)]
            node.beat()
            node.exit_workers(jid, 0)
            beat_until([a, b], lambda: api.job(jid)["state"] == "SUCCEEDED", "SUCCEEDED")
            w = watch.finish(timeout=30)
        finally:
            watch.kill()
        assert w.rc == 0, w
        lines = w.out.splitlines()
        states = [" ".join(ln.split()[:4]) for ln in lines if ln.startswith("state ")]
        assert "state RESTARTING gen 1:" in states, w
        assert states.index("state RESTARTING gen 1:") < states.index("state RUNNING gen 2:"), w
        assert any(ln.startswith("epoch 1/2 loss 0.8000") and ln.endswith("gen 1")
                   for ln in lines), w
        assert any(ln.startswith("epoch 2/2 loss 0.6000") and ln.endswith("gen 2")
                   for ln in lines), w
        assert "1 restarts" in lines[-1], w
        r = ctl(c, "logs", jid)
        assert r.rc == 0, r
        assert r.out.splitlines() == ["[rank 0] gen one", "--- generation 2 ---",
                                      "[rank 0] gen two"], r
        r = ctl(c, "status", jid)
        assert "generation:  2 (restarts 1)" in r.out and "RESTARTING" in r.out, r


def test_cli_watch_terminal_progress_bar():
    """On a terminal (a pty here) watch redraws a progress bar in place and keeps one line
    per finished epoch above it."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a, b = two_nodes(api)
        r = ctl(c, "submit", "--parsable", "--", "/bin/true")
        jid = r.out.strip()
        wait_assigned(jid, [a])
        api.wait_state(jid, "RUNNING", poke=lambda: (a.beat(), b.beat()))
        master, slave = pty.openpty()
        p = subprocess.Popen([CTL, "watch", jid], stdin=slave, stdout=slave, stderr=slave,
                             env=ctl_env(c), close_fds=True)
        os.close(slave)
        got = b""

        def read_for(seconds):
            nonlocal got
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                ready, _, _ = select.select([master], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # the pty's other side closed
                        return
                    if not chunk:
                        return
                    got += chunk
        try:
            read_for(1.5)
            a.pending_metrics = [metric(jid, 1, 1, 1, 3, 0.9)]
            a.beat()
            read_for(2.0)  # the bar now estimates the second epoch from the first one
            a.exit_workers(jid, 0)
            beat_until([a, b], lambda: api.job(jid)["state"] == "SUCCEEDED", "SUCCEEDED")
            deadline = time.monotonic() + 30
            while p.poll() is None and time.monotonic() < deadline:
                read_for(0.2)
            read_for(0.3)
            assert p.poll() == 0, (p.poll(), got)
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
            os.close(master)
        text = got.decode(errors="replace")
        assert "\r\x1b[K" in text, text  # redrawn in place
        frames = [f for f in text.replace("\r\n", "\n").split("\r\x1b[K") if f.strip()]
        bars = [f for f in frames if f.startswith("epoch 2/3 [")]
        assert bars, text
        assert "loss 0.9000" in bars[-1] and "samples/s" in bars[-1] and "%" in bars[-1], bars
        assert "\nepoch 1/3 loss 0.9000" in text.replace("\r\n", "\n") or \
            any(f.startswith("epoch 1/3 loss 0.9000") for f in frames), text
        assert ("job %s SUCCEEDED" % jid) in text, text


if __name__ == "__main__":
    api_sim.run_tests(globals())
