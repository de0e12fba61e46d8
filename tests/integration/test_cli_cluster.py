"""ddpctl cluster status|add|remove against real ddpd replicas (ddpd --cluster, dqlite) on
127.0.0.1, each with its own DDP_HOME and free ports, sharing the token files the test made:

- A single ddpd (--db): `cluster status` exits 1 with its FAILED_PRECONDITION message.
- Three replicas (node 1 founds, 2 and 3 --join): `status` through a follower's URL listed
  first in --server shows 3 voters, exactly one leader, every URL; `-o name` prints 1 2 3,
  `-o json` the raw answer; a viewer (made with `ddpctl users add --role viewer`) may read
  it but gets 403 on `remove`; removing the leader (the replica answering) is refused.
- `cluster remove` of a follower as admin: 2 members left.
- `cluster add`: a fresh node 4 (ddpd --cluster --node-id 4 with a --join where nothing
  listens, so it waits with its dqlite node running) made a voter by `cluster add 4 ADDR`:
  status shows it a voter.
- Bad usage (no verb, unknown verb, bad or missing id, bad address, extra argument,
  --no-headers with remove): exit 2 naming the argument, nothing sent.

Every wait is bounded; every process started is killed at the end, also on failure.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import CTL, assert_usage, ctl, ctl_env  # noqa: E402
from cluster import BIN, Cluster, free_port, wait_for  # noqa: E402


class Replicas:
    """ddpd replicas in one temporary folder; stop() kills them all (process groups)."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="ddp-test-cluster-")
        self.procs = {}  # node id -> Popen
        self.api = {}  # node id -> API URL
        self.raft = {}  # node id -> raft address
        self.user_token_file = os.path.join(self.tmp, "user.token")
        self.agent_token_file = os.path.join(self.tmp, "agent.token")
        for f in (self.user_token_file, self.agent_token_file):
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (secrets.token_hex(24) + "\n").encode())
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, nid, join=(), wait=True):
        home = os.path.join(self.tmp, "node%d" % nid)
        os.makedirs(home, exist_ok=True)
        if nid not in self.api:
            self.api[nid] = "http://127.0.0.1:%d" % free_port()
            self.raft[nid] = "127.0.0.1:%d" % free_port()
        argv = [os.path.join(BIN, "ddpd"), "--cluster", "--node-id", str(nid),
                "--raft-address", self.raft[nid], "--raft-latency-ms", "20",
                "--listen", self.api[nid][len("http://"):],
                "--token-file", self.user_token_file,
                "--agent-token-file", self.agent_token_file]
        if join:
            argv += ["--join", ",".join(join)]
        env = dict(os.environ, DDP_HOME=home)
        log = open(os.path.join(self.tmp, "ddpd%d.log" % nid), "ab")
        self.procs[nid] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
        log.close()
        if wait:
            wait_for("ddpd %d /healthz" % nid, lambda: self.health(nid), timeout=40)

    def log(self, nid):
        try:
            with open(os.path.join(self.tmp, "ddpd%d.log" % nid), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def health(self, nid):
        p = self.procs[nid]
        if p.poll() is not None:
            raise AssertionError("ddpd %d exited with %s; log:\n%s" % (nid, p.returncode,
                                                                      self.log(nid)))
        try:
            with urllib.request.urlopen(self.api[nid] + "/healthz", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def kill(self, nid):
        p = self.procs.get(nid)
        if p is None or p.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            try:
                p.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                pass

    def stop(self):
        for nid in sorted(self.procs, reverse=True):
            self.kill(nid)
        if os.environ.get("DDP_TEST_KEEP"):
            print("kept test folder", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def run(servers, token_file, *args, timeout=60):
    return ctl(None, "--server", servers, "--token-file", token_file, *args,
               env=ctl_env(None), timeout=timeout)


def members(servers, token_file):
    r = run(servers, token_file, "-o", "json", "cluster", "status")
    assert r.rc == 0, r
    return json.loads(r.out)["members"]


def settled(servers, token_file, n):
    """Waits (bounded) until the cluster lists n voters and exactly one leader; returns the
    members."""
    def ok():
        r = run(servers, token_file, "-o", "json", "cluster", "status")
        if r.rc != 0:
            return None
        m = json.loads(r.out)["members"]
        if len(m) != n or any(x["role"] != "voter" for x in m):
            return None
        return m if sum(1 for x in m if x["leader"]) == 1 else None
    return wait_for("%d voters, one leader" % n, ok, timeout=40, interval=0.3)


def dead_raft_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


def check_usage():
    env = ctl_env(None, extra={"DDP_SERVER": "http://127.0.0.1:1"})
    u = "cluster status"
    for args, what in ((["cluster"], "missing what to do"),
                       (["cluster", "frob"], "'frob' is not status, add or remove"),
                       (["cluster", "remove"], "remove: missing the member id"),
                       (["cluster", "remove", "0"], "member id: '0'"),
                       (["cluster", "remove", "x3"], "member id: 'x3'"),
                       (["cluster", "remove", "3", "4"], "unexpected argument '4'"),
                       (["cluster", "add"], "add: missing the member id"),
                       (["cluster", "add", "4"], "add: missing the raft address"),
                       (["cluster", "add", "abc", "127.0.0.1:9000"], "member id: 'abc'"),
                       (["cluster", "add", "4", "127.0.0.1"], "raft address: '127.0.0.1'"),
                       (["cluster", "add", "4", ":9000"], "raft address: ':9000'"),
                       (["cluster", "add", "4", "127.0.0.1:0"], "raft address: '127.0.0.1:0'"),
                       (["cluster", "add", "4", "127.0.0.1:70000"], "raft address"),
                       (["cluster", "status", "x"], "unexpected argument 'x'"),
                       (["cluster", "remove", "3", "--no-headers"], "--no-headers goes with"),
                       (["cluster", "status", "--bogus"], "unknown option '--bogus'")):
        r = ctl(None, *args, env=env)
        assert_usage(r, u)
        assert what in r.err, (what, r)
    r = ctl(None, "cluster", "--help", env=env)
    assert r.rc == 0 and "usage: ddpctl cluster status" in r.out and "add ID IP:PORT" in r.out, r
    r = ctl(None, "--help", env=env)
    assert r.rc == 0 and "  cluster " in r.out, r
    print("ok: usage errors exit 2 naming the argument; --help")


def check_single():
    with Cluster() as c:
        r = ctl(c, "cluster", "status")
        assert r.rc == 1 and r.out == "", r
        assert "is not a cluster (--db)" in r.err, r
        r = ctl(c, "cluster", "remove", "2")
        assert r.rc == 1 and "is not a cluster (--db)" in r.err, r
    print("ok: a single ddpd: exit 1, FAILED_PRECONDITION's message")


def main():
    if not os.access(CTL, os.X_OK):
        raise SystemExit("no ddpctl at %s" % CTL)
    check_usage()
    check_single()
    with Replicas() as rs:
        rs.start(1)
        wait_for("node 1 leads", lambda: (rs.health(1) or {}).get("role") == "leader",
                 timeout=40)
        rs.start(2, join=[rs.raft[1]])
        rs.start(3, join=[rs.raft[1]])
        admin = rs.user_token_file
        # A follower first: it redirects (307) to the leader, which answers.
        servers = ",".join([rs.api[2], rs.api[3], rs.api[1]])
        m = settled(servers, admin, 3)
        assert sorted(x["id"] for x in m) == [1, 2, 3], m
        leader = [x["id"] for x in m if x["leader"]][0]
        assert {x["id"]: x["raft_address"] for x in m} == rs.raft, m
        # A URL is written by a replica once it leads: the leader's is known.
        assert all(x["url"] in (None, rs.api[x["id"]]) for x in m), m
        assert [x["url"] for x in m if x["leader"]] == [rs.api[leader]], m
        follower = [n for n in (2, 3, 1) if n != leader][0]
        r = run(",".join([rs.api[follower], rs.api[leader]]), admin, "cluster", "status")
        assert r.rc == 0, r
        lines = r.out.splitlines()
        assert lines[0].split() == ["ID", "RAFT-ADDRESS", "ROLE", "LEADER", "URL"], r
        rows = [ln.split() for ln in lines[1:]]
        assert len(rows) == 3 and all(x[2] == "voter" for x in rows), r
        assert [x[3] for x in rows].count("yes") == 1, r
        assert {int(x[0]): x[4] for x in rows} == {x["id"]: x["url"] or "-" for x in m}, r
        # The leader unlisted: the redirect carries no token (ddpctl's rule), so 401.
        r = run(rs.api[follower], admin, "cluster", "status")
        assert r.rc == 1 and "missing bearer token" in r.err, r
        r = run(servers, admin, "cluster", "status", "--no-headers")
        assert r.rc == 0 and len(r.out.splitlines()) == 3 and "RAFT-ADDRESS" not in r.out, r
        r = run(servers, admin, "-o", "name", "cluster", "status")
        assert r.rc == 0 and r.out.split() == ["1", "2", "3"], r
        print("ok: three voters, one leader (node %d), through follower %d" % (leader, follower))

        # A viewer reads the cluster, and may not change it.
        viewer_file = os.path.join(rs.tmp, "viewer.token")
        r = run(servers, admin, "users", "add", "vic", "--role", "viewer", "--token-out",
                viewer_file)
        assert r.rc == 0, r
        r = run(servers, viewer_file, "-o", "name", "cluster", "status")
        assert r.rc == 0 and r.out.split() == ["1", "2", "3"], r
        victim = 3 if leader != 3 else 2
        r = run(servers, viewer_file, "cluster", "remove", str(victim))
        assert r.rc == 1 and r.out == "" and "admin" in r.err, r
        # The leader answers, and refuses to remove itself.
        r = run(servers, admin, "cluster", "remove", str(leader))
        assert r.rc == 1 and "it is the replica answering" in r.err, r
        assert len(members(servers, admin)) == 3
        print("ok: viewer reads, 403 on remove; the leader does not remove itself")

        r = run(servers, admin, "cluster", "remove", str(victim))
        assert r.rc == 0 and r.out.startswith("removed member %d (2 members left)" % victim), r
        rs.kill(victim)
        left = sorted({1, 2, 3} - {victim})
        servers = ",".join(rs.api[n] for n in left)
        m = settled(servers, admin, 2)
        assert sorted(x["id"] for x in m) == left, m
        r = run(servers, admin, "-o", "name", "cluster", "status")
        assert r.rc == 0 and r.out.split() == [str(n) for n in left], r
        print("ok: remove %d: members %s" % (victim, left))

        # add: node 4 joins through an address where nothing listens, so its ddpd keeps its
        # dqlite node up, waiting, until `cluster add` makes it a voter.
        rs.start(4, join=[dead_raft_address()], wait=False)
        host, port = rs.raft[4].rsplit(":", 1)

        def raft_up():
            if rs.procs[4].poll() is not None:
                raise AssertionError("ddpd 4 exited: %s" % rs.log(4))
            try:
                with socket.create_connection((host, int(port)), timeout=1):
                    return True
            except OSError:
                return False
        wait_for("node 4's raft port", raft_up, timeout=20)
        r = run(servers, admin, "cluster", "add", "4", rs.raft[4])
        assert r.rc == 0 and r.out.startswith("added member 4 at %s (3 members)" % rs.raft[4]), r
        m = members(servers, admin)
        assert [x["role"] for x in m if x["id"] == 4] == ["voter"], m
        assert [x["raft_address"] for x in m if x["id"] == 4] == [rs.raft[4]], m
        r = run(servers, admin, "-o", "name", "cluster", "status")
        assert r.rc == 0 and r.out.split() == [str(n) for n in left + [4]], r
        # Adding it again is an error of ddpd's, exit 1.
        r = run(servers, admin, "cluster", "add", "4", rs.raft[4])
        assert r.rc == 1 and r.out == "" and "already in use" in r.err, r
        print("ok: add 4: a voter")
        rs.kill(4)
    print("PASS")


if __name__ == "__main__":
    main()
