"""ddpctl logs --tail N against a live ddpd with one simulated agent running ranks 0 and 1 of a
job: the last N lines of a 3000-line log (all ranks, --rank, a tail bigger than the log, -o
json, --tail=N), --tail N -f (the last lines, then each new line once, ending with the job),
and the usage errors of --tail (exit 2, the message names the flag)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_sim  # noqa: E402
from api_sim import Api, SimNode, cluster, wait_assigned  # noqa: E402
from cli_util import Background, assert_usage, beat_until, ctl  # noqa: E402

BEATS = 3
R0, R1 = 700, 300  # lines per beat of rank 0 and rank 1


def log(job_id, rank, seq, lines):
    return {"job_id": job_id, "generation": 1, "rank": rank, "seq": seq, "lines": list(lines)}


def test_cli_logs_tail_usage_errors():
    # No ddpd is needed: a usage error never sends anything.
    for bad, msg in (("0", "--tail: 0 is out of range [1, 10000]"),
                     ("-1", "--tail: -1 is out of range [1, 10000]"),
                     ("10001", "--tail: 10001 is out of range [1, 10000]"),
                     ("x", "--tail: 'x' is not an integer"),
                     ("", "--tail: empty value, expected an integer")):
        for args in (["--tail", bad], ["--tail=" + bad]):
            r = ctl(None, "logs", "j-1", *args)
            assert_usage(r, "logs JOB")
            assert ("ddpctl logs: " + msg) in r.err, (args, r)
    # --rank to ddpd's bound (docs/api.md: 0..1048576), a usage error beyond it
    r = ctl(None, "logs", "j-1", "--rank", "1048577")
    assert_usage(r, "logs JOB")
    assert "--rank: 1048577 is out of range [0, 1048576]" in r.err, r
    r = ctl(None, "logs", "j-1", "--tail")
    assert_usage(r, "logs JOB")
    assert "option '--tail' needs a value" in r.err, r
    h = ctl(None, "logs", "--help")
    assert h.rc == 0 and "--tail N" in h.out and "logs JOB [--rank R] [--tail N] [-f]" in h.out, h


def test_cli_logs_follow_json_prints_one_empty_page():
    """-o json logs -f of a job without lines yet prints one empty page, not one a poll."""
    with cluster(node_timeout=300) as c:
        r = ctl(c, "submit", "--parsable", "--", "/bin/true")  # no node: stays PENDING
        assert r.rc == 0, r
        jid = r.out.strip()
        follow = Background(c, "-o", "json", "logs", jid, "-f")
        try:
            time.sleep(2.2)  # four polls or so
            assert ctl(c, "cancel", jid).rc == 0
            r = follow.finish(timeout=30)
        finally:
            follow.kill()
        pages = [json.loads(ln) for ln in r.out.splitlines()]
        assert r.rc == 0 and pages == [{"lines": [], "next": 0, "dropped": 0}], r


def test_cli_logs_tail_and_follow():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "node-a", slots=2)
        n.register()
        n.beat()
        r = ctl(c, "submit", "--parsable", "--nproc-per-node", "2", "--", "/bin/true")
        assert r.rc == 0, r
        jid = r.out.strip()
        wait_assigned(jid, [n])
        # Before any line: nothing, exit 0.
        r = ctl(c, "logs", jid, "--tail", "5")
        assert r.rc == 0 and r.out == "", r
        s0 = s1 = 1
        for _ in range(BEATS):
            n.pending_logs = [log(jid, 0, s0, ("zero %d" % i for i in range(s0, s0 + R0))),
                              log(jid, 1, s1, ("one %d" % i for i in range(s1, s1 + R1)))]
            n.beat()
            s0 += R0
            s1 += R1
        full = ctl(c, "logs", jid)
        assert full.rc == 0 and len(full.out.splitlines()) == BEATS * (R0 + R1), full
        lines = full.out.splitlines()

        r = ctl(c, "logs", jid, "--tail", "5")
        assert r.rc == 0 and r.out.splitlines() == lines[-5:], r
        assert r.err == "", r
        r = ctl(c, "logs", jid, "--tail=1200")
        assert r.rc == 0 and r.out.splitlines() == lines[-1200:], r.out[:200]
        r = ctl(c, "logs", jid, "--rank", "1", "--tail", "3")
        assert r.rc == 0 and r.out == "one 898\none 899\none 900\n", r
        r = ctl(c, "logs", jid, "--tail", "10000", "--rank", "1")
        assert r.rc == 0 and r.out == ctl(c, "logs", jid, "--rank", "1").out, r.out[:200]
        assert len(r.out.splitlines()) == BEATS * R1, len(r.out.splitlines())
        r = ctl(c, "logs", jid, "--tail", "2", "-o", "json")
        assert r.rc == 0 and len(r.out.splitlines()) == 1, r
        page = json.loads(r.out)
        assert [ln["text"] for ln in page["lines"]] == ["one 899", "one 900"], page
        assert page["next"] == page["lines"][-1]["seq"], page

        # --tail with -f: the last 2 lines, then the new ones once each, until the job ends.
        follow = Background(c, "logs", jid, "--tail", "2", "-f")
        follow_r0 = Background(c, "logs", jid, "--rank", "0", "--tail", "1", "-f")
        try:
            follow.read_until("[rank 1] one 900\n")
            follow_r0.read_until("zero 2100\n")
            n.pending_logs = [log(jid, 1, s1, ["one new"]), log(jid, 0, s0, ["zero new"])]
            n.beat()
            follow.read_until("[rank 0] zero new\n")
            follow_r0.read_until("zero new\n")
            n.pending_logs = [log(jid, 0, s0 + 1, ["zero last"])]
            n.exit_workers(jid, 0)
            beat_until([n], lambda: api.job(jid)["state"] == "SUCCEEDED", "SUCCEEDED")
            f = follow.finish(timeout=30)
            assert f.rc == 0, f
            assert f.out.splitlines() == lines[-2:] + ["[rank 1] one new", "[rank 0] zero new",
                                                       "[rank 0] zero last"], f
            f = follow_r0.finish(timeout=30)
            assert f.rc == 0 and f.out == "zero 2100\nzero new\nzero last\n", f
        finally:
            follow.kill()
            follow_r0.kill()
        # A finished job: --tail -f prints the tail and ends at once.
        r = ctl(c, "logs", jid, "-f", "--tail", "1")
        assert r.rc == 0 and r.out == "[rank 0] zero last\n", r
        r = ctl(c, "logs", "j-42", "--tail", "3")
        assert r.rc == 1 and "job j-42 not found" in r.err, r


def ctl_on_terminal(c, *args, timeout=30):
    """Runs ddpctl ARGS with stdout and stderr on a pseudo-terminal; returns (rc, bytes)."""
    import pty
    import select
    import subprocess
    import time
    from cli_util import CTL, ctl_env
    master, slave = pty.openpty()
    p = subprocess.Popen([CTL] + list(args), stdout=slave, stderr=slave, env=ctl_env(c))
    os.close(slave)
    out, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: ddpctl is gone
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=10), out


def test_cli_logs_escape_control_characters_on_a_terminal():
    """A worker's line that clears the screen and paints a fake state is shown as text on a
    terminal (\\x1b...), and passes unchanged into a pipe."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "node-a", slots=1)
        n.register()
        n.beat()
        r = ctl(c, "submit", "--parsable", "--", "/bin/true")
        assert r.rc == 0, r
        jid = r.out.strip()
        wait_assigned(jid, [n])
        evil = "\x1b[2J\x1b[Hstate: SUCCEEDED\x07 \u009b31m done"
        n.pending_logs = [log(jid, 0, 1, [evil])]
        n.beat()
        rc, out = ctl_on_terminal(c, "logs", jid)
        assert rc == 0, (rc, out)
        assert b"\x1b" not in out and b"\x07" not in out and "\u009b".encode() not in out, out
        assert b"\\x1b[2J\\x1b[Hstate: SUCCEEDED\\x07 \\xc2\\x9b31m done" in out, out
        r = ctl(c, "logs", jid)  # a pipe: the bytes as the job wrote them
        assert r.rc == 0 and r.out == "[rank 0] " + evil + "\n", repr(r.out)


if __name__ == "__main__":
    api_sim.run_tests(globals())
