"""A replicated coordinator under faults: three ddpd replicas (--cluster, an embedded dqlite
node each), each in its own network namespace, agents in two others, a real training job,
real ddpctl clients. Loopback fallback where namespaces cannot be made (the link cut is then
left out, said so).

One scenario, in order, on one cluster and one training job that must never restart (it
re-forms once, for the node that dies in step 5):
  1. form: r1 founds, r2 and r3 join; one leader, two followers naming it.
  2. leader kill: 4 ddpctl clients submit 8 jobs each through the list of the 3 replicas while
     the leader is killed with -9: every acknowledged job is there once, none twice; figure:
     kill to the first submit accepted after it.
  3. rejoin: the killed replica starts again on its data: a follower naming the new leader.
  4. link cut (netns only): the leader's link goes down: a new leader accepts a submit within
     the election timeout + 2 s; the cut one, asked from inside its namespace, stops taking
     writes; the link restored, it follows the new leader.
  5. no quorum: two replicas killed: the one left answers a submit with 503 not_leader, the
     training goes on; node b's agent is killed -9 meanwhile; both replicas started again: a
     leader, every acknowledged job is there, and the job re-forms on node a.
  6. the job SUCCEEDED in generation 2 (the one re-form for b) with 0 restarts, every epoch's
     metrics arrived.
  7. recovery from a quorum lost for good: all stopped, `ddpd --recover 1=ADDR` on r1's data,
     r1 alone leads with every acknowledged job.
The figures are printed as "figure NAME = VALUE" and in the RESULT line (docs/ha.md).

A second scenario, diskfull: r3's data on a 64 MiB tmpfs filled once the cluster formed; 3,000
submits all acknowledged (r1 and r2 are a quorum), r3 up but its log stopped behind; r3 then
replaced (removed, started as node 4 on an empty folder: a snapshot); with r1 killed, the
leader of r2 and node 4 holds every acknowledged job.

A third, leaderfull: the leader's own data on a full tmpfs; 3,000 submits through whichever
replica leads all acknowledged, each job once: the leader retires at its first write that
fails in its disk and hands over, or stops (exit 1, saying why) so that the others elect.

A fourth, leaderalone: the same with r3 down, so that r2 alone could not elect: r1 stays up
(saying why), and once its disk has room again it takes writes; each job once.

usage: test_ha.py [ha|diskfull|leaderfull|leaderalone]   (default ha)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from faultlib import FaultCluster, run_scenario, wait_for, worker_cmd
from cluster import BIN, free_port

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
LATENCY_MS = 20
ELECTION_S = 0.3  # dqlite's election timeout at --raft-latency-ms 20 (15 x the latency)
SYNTH = "synthetic:12000:784:10"
EPOCHS = int(os.environ.get("DDP_HA_EPOCHS", "80"))
CLIENTS = 4
SUBMITS = 8
REPLICAS = ("r1", "r2", "r3")


def http(method, url, token=None, body=None, timeout=2.0):
    """One request, no redirect followed: (status, parsed body or text), or (None, reason)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **kw):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    except OSError as e:
        return None, str(e)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class HACluster(FaultCluster):
    """Three replicas r1..r3 in their namespaces; agents point at all three."""

    def __init__(self, net):
        super().__init__(net, node_timeout=4)
        self.rep = {}
        for i, r in enumerate(REPLICAS, 1):
            addr = net.addr[r]
            port, rport = free_port(), free_port()
            self.rep[r] = {"id": i, "url": "http://%s:%d" % (addr, port),
                           "listen": "%s:%d" % (addr, port),
                           "raft": "%s:%d" % (addr, rport),
                           "home": os.path.join(self.tmp, "replica-" + r), "proc": None}
        self.urls = ",".join(self.rep[r]["url"] for r in REPLICAS)
        self.mounts = []
        self.url = self.rep["r1"]["url"]

    def start_replica(self, r):
        x = self.rep[r]
        os.makedirs(x["home"], exist_ok=True)
        argv = [os.path.join(BIN, "ddpd"), "--cluster", "--node-id", str(x["id"]),
                "--raft-address", x["raft"], "--listen", x["listen"],
                "--data-dir", os.path.join(x["home"], "raft"),
                "--raft-latency-ms", str(LATENCY_MS), "--node-timeout", str(self.node_timeout),
                "--token-file", os.path.join(self.home, "user.token"),
                "--agent-token-file", os.path.join(self.home, "agent.token")]
        if x["id"] != 1:
            argv += ["--join", ",".join(self.rep[o]["raft"] for o in REPLICAS if o != r)]
        x["proc"] = self._spawn(self.net.run_argv(r, argv), "ddpd-%s.log" % r,
                                env={"DDP_HOME": x["home"]})
        wait_for("%s /healthz" % r, lambda: self.health(r) is not None, timeout=40)
        if self.user_token is None:
            self.user_token = open(os.path.join(self.home, "user.token")).read().strip()
            self.agent_token = open(os.path.join(self.home, "agent.token")).read().strip()

    def kill_replica(self, r):
        p = self.rep[r]["proc"]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)

    def health(self, r):
        p = self.rep[r]["proc"]
        if p is not None and p.poll() is not None:
            raise AssertionError("ddpd %s exited with %s; log:\n%s" % (
                r, p.returncode, self.log("ddpd-%s.log" % r)[-3000:]))
        st, body = http("GET", self.rep[r]["url"] + "/healthz", timeout=1.0)
        return body if st == 200 and isinstance(body, dict) else None

    def leader(self, among=REPLICAS):
        """The replica that says it leads and that every other live one of `among` follows,
        or None."""
        roles = {}
        for r in among:
            if self.rep[r]["proc"] is None or self.rep[r]["proc"].poll() is not None:
                continue
            h = self.health(r)
            if h is None:
                return None
            roles[r] = h
        leaders = [r for r, h in roles.items() if h["role"] == "leader"]
        if len(leaders) != 1:
            return None
        lu = self.rep[leaders[0]]["url"]
        if any(h["role"] != "leader" and h.get("leader") != lu for h in roles.values()):
            return None
        return leaders[0]

    def request(self, method, path, **kw):
        """Cluster.request on the leader, found again after a redirect, a not_leader answer
        or a connection failure (bounded: 20 s)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                a = super().request(method, path, **kw)
                if a.status not in (307, 503) or "not_leader" not in a.text:
                    return a
            except OSError:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                return a
            time.sleep(0.1)
            for r in REPLICAS:
                p = self.rep[r]["proc"]
                if p is None or p.poll() is not None:
                    continue
                try:
                    h = self.health(r)
                except AssertionError:
                    continue
                if h and h["role"] == "leader":
                    self.url = self.rep[r]["url"]
                    break

    def _healthy(self):
        return True

    def agent_server(self):
        return self.urls

    def ddpctl_list(self, *args, servers=None, timeout=60):
        argv = [os.path.join(BIN, "ddpctl"), "--server", servers or self.urls, "--token-file",
                os.path.join(self.home, "user.token")] + list(args)
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def stop(self):
        """Kills the replicas first, so that their tmpfs mounts can be taken away before the
        temporary folder is removed."""
        for r in REPLICAS:
            p = self.rep[r]["proc"]
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        for m in list(self.mounts):
            subprocess.run(["umount", m], timeout=20)
            self.mounts.remove(m)
        return super().stop()

    def dump(self, job_id=None):
        for r in REPLICAS:
            print("---- ddpd-%s.log (tail)\n" % r +
                  "\n".join(self.log("ddpd-%s.log" % r).splitlines()[-25:]))
        for n in self.agents:
            print("---- agent-%s.log (tail)\n" % n +
                  "\n".join(self.log("agent-%s.log" % n).splitlines()[-15:]))


def pending_spec(name):
    """A job that stays PENDING (no node has the label): the submits' payload."""
    return ["--name", name, "--node-selector", "pool=none", "--", "/bin/true"]


def clients_submit(c, acks, errors, t_kill, kill):
    """CLIENTS threads, each SUBMITS ddpctl submits through the replica list (each client's
    list starting at another replica); the leader is killed (kill()) after the 4th ack."""
    lock = threading.Lock()
    urls = [c.rep[r]["url"] for r in REPLICAS]

    def one(k):
        servers = ",".join(urls[k % 3:] + urls[:k % 3])
        for i in range(SUBMITS):
            name = "c%d-%d" % (k, i)
            t = time.monotonic()
            rc, out, err = c.ddpctl_list("submit", "--parsable", *pending_spec(name),
                                         servers=servers)
            with lock:
                if rc == 0:
                    acks.append((name, out.strip(), t, time.monotonic()))
                    if len(acks) == 4 and not t_kill:
                        t_kill.append(time.monotonic())
                        kill()
                else:
                    errors.append((name, rc, err.strip()[-300:]))

    ts = [threading.Thread(target=one, args=(k,)) for k in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=240)


def check_jobs(c, rep, acks, when):
    """Every acknowledged job is there exactly once (by its unique name and id)."""
    a = c.get("/v1/jobs?all=true&page_size=1000")
    rep.check("%s: jobs listed (%s)" % (when, a.status), a.status == 200, a.text[:300])
    jobs = a.json.get("jobs", []) if a.status == 200 else []
    names = {}
    for j in jobs:
        names.setdefault(j["name"], []).append(j["id"])
    missing = [(n, i) for n, i, _, _ in acks if i not in names.get(n, [])]
    dups = {n: ids for n, ids in names.items() if n.startswith("c") and len(ids) > 1}
    rep.check("%s: all %d acknowledged submits are there (missing %s)" % (
        when, len(acks), missing[:3]), not missing)
    rep.check("%s: no job twice (%s)" % (when, list(dups.items())[:3]), not dups)


def scenario(c, rep):
    # 1. form
    t = time.monotonic()
    c.start_replica("r1")
    wait_for("r1 leads", lambda: c.leader(("r1",)) == "r1", timeout=30)
    c.start_replica("r2")
    c.start_replica("r3")
    lead = wait_for("one leader that both others follow", lambda: c.leader(), timeout=30)
    rep.figure("form_s", "%.1f" % (time.monotonic() - t))
    rep.check("r1 founded the cluster and leads (%s)" % lead, lead == "r1")
    a = c.get("/v1/cluster")
    roles = sorted(m["role"] for m in a.json["members"]) if a.status == 200 else a.text
    rep.check("/v1/cluster: three voters (%s)" % roles, roles == ["voter"] * 3)
    fol = [r for r in REPLICAS if r != lead][0]
    st, _ = http("GET", c.rep[fol]["url"] + "/v1/jobs", token=c.user_token)
    rep.check("a follower redirects an API call (%s)" % st, st == 307)
    req = urllib.request.Request(c.rep[fol]["url"] + "/")
    with urllib.request.urlopen(req, timeout=5) as r:
        page_url = r.geturl()
    rep.check("the dashboard opened on a follower is served by the leader (%s)" % page_url,
              page_url == c.rep[lead]["url"] + "/")

    for n in ("a", "b"):
        c.start_agent(n, slots=2)
    c.wait_nodes_ready(["a", "b"], timeout=40)
    spec = {"name": "train", "command": worker_cmd(c, EPOCHS, SYNTH), "nnodes": "1:2",
            "nproc_per_node": 2, "max_restarts": 3, "grace_period_s": 5}
    jid = c.submit(spec)["id"]
    j = c.wait_state(jid, ("RUNNING",), timeout=60)
    rep.check("training job RUNNING on 4 ranks (%d)" % j["world_size"], j["world_size"] == 4)
    c.wait_epoch(jid, 1, timeout=120)
    hb = c.heartbeat_file("a", jid, 1, 0)

    # 2. leader kill under submits
    acks, errors, t_kill = [], [], []
    old = lead
    clients_submit(c, acks, errors, t_kill, lambda: c.kill_replica(old))
    rep.check("the leader was killed during the submits", bool(t_kill))
    # kill to the first acknowledgement of a submit sent after the kill (one in flight may
    # have been committed and answered by the old leader just before it died)
    after = sorted(done for _, _, start, done in acks if t_kill and start > t_kill[0])
    if after:
        rep.figure("failover_submit_s", "%.2f" % (after[0] - t_kill[0]))
    rep.check("%d of %d submits acknowledged (errors: %s)" % (
        len(acks), CLIENTS * SUBMITS, errors[:2]), len(acks) == CLIENTS * SUBMITS)
    lead = wait_for("a new leader", lambda: c.leader([r for r in REPLICAS if r != old]),
                    timeout=20)
    rep.check("a new leader (%s), not the killed %s" % (lead, old), lead != old)
    check_jobs(c, rep, acks, "after the leader kill")

    # 3. rejoin
    c.start_replica(old)
    h = wait_for("%s follows" % old, lambda: (lambda h: h if h and h["role"] == "follower"
                                              else None)(c.health(old)), timeout=30)
    rep.check("the killed replica rejoined as a follower of %s" % lead,
              h["leader"] == c.rep[lead]["url"])

    # 4. link cut
    if c.net.mode == "netns":
        cut = lead
        m0 = os.stat(hb).st_mtime
        t0 = time.monotonic()
        c.net.cut(cut)
        others = [r for r in REPLICAS if r != cut]
        sub = {}

        def submit_others():
            sub["r"] = c.ddpctl_list("submit", "--parsable", *pending_spec("cut-0"),
                                     servers=",".join(c.rep[r]["url"] for r in others))
            sub["t"] = time.monotonic() - t0
        th = threading.Thread(target=submit_others)
        th.start()
        # The cut replica, asked from inside its namespace, stops taking writes.
        probe = [sys.executable, "-c",
                 "import json,sys,urllib.request as u\n"
                 "r=u.Request(sys.argv[1]+'/v1/jobs',data=b'{}',method='POST',"
                 "headers={'Authorization':'Bearer '+sys.argv[2],"
                 "'Content-Type':'application/json'})\n"
                 "class N(u.HTTPRedirectHandler):\n"
                 "  def redirect_request(self,*a,**k): return None\n"
                 "try: print(u.build_opener(N).open(r,timeout=2).status)\n"
                 "except u.HTTPError as e: print(e.code)\n",
                 c.rep[cut]["url"], c.user_token]

        def refuses():
            r = subprocess.run(c.net.run_argv(cut, probe), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=20)
            code = r.stdout.decode().strip()
            # 400 would mean the coordinator read the (empty) spec: it still acts
            return code if code in ("307", "503") else None
        code = wait_for("the cut replica refuses writes", refuses, timeout=ELECTION_S + 5,
                        interval=0.02)
        rep.figure("old_leader_stops_s", "%.2f" % (time.monotonic() - t0))
        th.join(timeout=60)
        rc, out, err = sub.get("r", (1, "", "no answer"))
        took = sub.get("t", 99.0)
        rep.figure("failover_cut_s", "%.2f" % took)
        rep.check("link cut: a submit accepted by the others in %.2f s <= election %.1f s + 2 s"
                  " (%s)" % (took, ELECTION_S, err.strip()[-200:]),
                  rc == 0 and took <= ELECTION_S + 2.0)
        if rc == 0:
            acks.append(("cut-0", out.strip(), t0, time.monotonic()))
        rep.check("the cut replica answers a write with %s (no coordinator)" % code, bool(code))
        rep.check("training goes on through the cut", os.stat(hb).st_mtime > m0)
        c.net.restore(cut)
        new = wait_for("a leader the cut one follows again", lambda: c.leader(), timeout=30)
        rep.check("the cut replica follows %s after the link is back" % new, new != cut)
        lead = new
    else:
        print("SKIP link cut: loopback mode (%s)" % c.net.why)

    # 5. no quorum
    down = [lead, [r for r in REPLICAS if r != lead][0]]
    alone = [r for r in REPLICAS if r not in down][0]
    m0 = os.stat(hb).st_mtime
    ms = c.metrics(jid)
    rep.figure("epoch_at_quorum_loss", max((m.get("epoch", 0) for m in ms), default=0))
    for r in down:
        c.kill_replica(r)
    h = wait_for("%s without a leader" % alone,
                 lambda: (lambda h: h if h and h["role"] == "candidate" else None)(
                     c.health(alone)), timeout=20)
    st, body = http("POST", c.rep[alone]["url"] + "/v1/jobs", token=c.user_token,
                    body={"command": ["/bin/true"]})
    err = body.get("error", {}) if isinstance(body, dict) else {}
    rep.check("no quorum: a submit is refused 503 not_leader (%s %s)" % (st, err),
              st == 503 and err.get("code") == "not_leader" and "quorum" in err.get("message"))
    wait_for("training goes on without a coordinator", lambda: os.stat(hb).st_mtime > m0 + 0.5,
             timeout=30)
    # A node dies while no coordinator serves: once the quorum is back the job re-forms on
    # the node left, as with one ddpd.
    c.agents["b"].send_signal(signal.SIGKILL)
    c.agents["b"].wait(timeout=10)
    for r in down:
        c.start_replica(r)
    lead = wait_for("a leader again", lambda: c.leader(), timeout=30)
    check_jobs(c, rep, acks, "after the quorum came back")
    j = wait_for("generation 2 RUNNING on a", lambda: (lambda x: x if x["generation"] >= 2 and
                                                      x["state"] == "RUNNING" else None)(
        c.job(jid)), timeout=60)
    rep.check("node b died during the outage: generation 2 on a alone, world size 2 (%s %d)" % (
        [n["name"] for n in j["nodes"]], j["world_size"]),
        [n["name"] for n in j["nodes"]] == ["a"] and j["world_size"] == 2)

    # 6. the job
    j = c.wait_state(jid, TERMINAL, timeout=300)
    rep.check("training SUCCEEDED (%s: %s)" % (j["state"], j["reason"]), j["state"] == "SUCCEEDED")
    rep.check("re-formed once for the lost node, never restarted: generation 2, restarts 0 "
              "(%d %d)" % (j["generation"], j["restarts"]),
              j["generation"] == 2 and j["restarts"] == 0)
    eps = sorted({m.get("epoch") for m in c.metrics(jid) if m.get("epoch")})
    rep.check("every epoch's metrics arrived (%d of %d)" % (len(eps), EPOCHS),
              eps == list(range(1, EPOCHS + 1)))

    # 7. lost for good: two replicas gone with their disks; r1 alone recovers (dqlite's
    # recover, ddpd --recover) and serves with every acknowledged job.
    for r in REPLICAS:
        c.kill_replica(r)
    x = c.rep["r1"]
    r = subprocess.run([os.path.join(BIN, "ddpd"), "--cluster", "--node-id", "1",
                        "--raft-address", x["raft"], "--data-dir",
                        os.path.join(x["home"], "raft"), "--recover", "1=" + x["raft"]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    rep.check("ddpd --recover 1=ADDR on r1's data (%d: %s)" % (
        r.returncode, r.stdout.decode(errors="replace").strip()[-200:]), r.returncode == 0)
    c.start_replica("r1")
    wait_for("r1 leads alone", lambda: c.leader(("r1",)) == "r1", timeout=30)
    c.url = x["url"]
    check_jobs(c, rep, acks, "recovered on r1 alone")
    a = c.get("/v1/cluster")
    n = len(a.json["members"]) if a.status == 200 else a.text
    rep.check("the recovered cluster has one member (%s)" % n, n == 1)
    return jid


def submit_many(c, leader, prefix, n, rep):
    """n submits of PENDING jobs on one keep-alive connection to the leader; their names."""
    import http.client
    host, port = c.rep[leader]["listen"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    names, bad = [], []
    for i in range(n):
        name = "%s-%d" % (prefix, i)
        conn.request("POST", "/v1/jobs", body=json.dumps(
            {"name": name, "command": ["/bin/true"], "node_selector": {"pool": "none"}}),
            headers={"Authorization": "Bearer " + c.user_token,
                     "Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status == 201:
            names.append(name)
        elif len(bad) < 3:
            bad.append((r.status, body[:200]))
    conn.close()
    rep.check("%d of %d submits acknowledged (%s)" % (len(names), n, bad), len(names) == n)
    return names


def full_disk_cluster(c, rep, victim):
    """The three replicas, r1 founding and leading, victim's --data-dir on a 64 MiB tmpfs
    filled once the cluster formed; its path."""
    if os.geteuid() != 0:
        raise RuntimeError("needs root (a tmpfs mount)")
    data = os.path.join(c.rep[victim]["home"], "raft")
    os.makedirs(data, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", data], check=True,
                   timeout=20)
    c.mounts.append(data)
    c.start_replica("r1")
    wait_for("r1 leads", lambda: c.leader(("r1",)) == "r1", timeout=30)
    c.start_replica("r2")
    c.start_replica("r3")
    wait_for("one leader that both others follow", lambda: c.leader() == "r1", timeout=30)
    fd = os.open(os.path.join(data, "fill"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(128):  # 64 MiB at most
            os.write(fd, b"\0" * (1 << 19))
    except OSError:
        pass
    finally:
        os.close(fd)
    st = os.statvfs(data)
    rep.check("%s's disk is full (%d KiB free)" % (victim, st.f_bavail * st.f_frsize // 1024),
              st.f_bavail * st.f_frsize < (1 << 20))
    return data


def scenario_diskfull(c, rep):
    """r3's data on a 64 MiB tmpfs, filled once the cluster formed: the cluster takes every
    write (r1 and r2 are a quorum), r3 stays up; then r3 is replaced, as docs/ha.md says: removed,
    started again as a new node on an empty folder, and it catches up by a snapshot."""
    x3 = c.rep["r3"]
    data3 = full_disk_cluster(c, rep, "r3")
    # dqlite preallocated three 8 MiB segments there: about 2,000 submits fill them.
    t0 = time.monotonic()
    names = submit_many(c, "r1", "d", 3000, rep)
    rep.figure("full_submits_s", "%.1f" % (time.monotonic() - t0))
    h = c.health("r3")
    rep.check("r3 with a full disk is up and follows (%s)" % (h and h["role"]),
              h is not None and h["role"] == "follower")
    segs = sorted(f for f in os.listdir(os.path.join(c.rep["r1"]["home"], "raft"))
                  if f[:1].isdigit())
    segs3 = sorted(f for f in os.listdir(data3) if f[:1].isdigit())
    last = lambda fs: max((int(f.split("-")[1]) for f in fs), default=0)  # noqa: E731
    rep.figure("log_index_leader", last(segs))
    rep.figure("log_index_full_r3", last(segs3))
    rep.check("r3's log stopped behind the leader's (%d < %d)" % (last(segs3), last(segs)),
              last(segs3) < last(segs))
    # Replace r3: remove node 3, start node 4 on an empty folder in its place.
    a = c.request("DELETE", "/v1/cluster/members/3")
    rep.check("node 3 removed (%s)" % a.status, a.status == 200, a.text[:300])
    c.kill_replica("r3")
    subprocess.run(["umount", data3], check=True, timeout=20)
    c.mounts.remove(data3)
    shutil.rmtree(x3["home"])
    x3["id"] = 4
    c.start_replica("r3")
    wait_for("node 4 follows r1", lambda: (lambda h: h if h and h["role"] == "follower"
                                           else None)(c.health("r3")), timeout=30)
    a = c.get("/v1/cluster")
    ids = sorted(m["id"] for m in a.json["members"]) if a.status == 200 else a.text
    rep.check("the cluster is r1, r2 and node 4 (%s)" % ids, ids == [1, 2, 4])
    # Catch-up: with r1 killed, r2 and node 4 must elect one of them, and it holds every job.
    c.kill_replica("r1")
    lead = wait_for("r2 or node 4 leads", lambda: c.leader(("r2", "r3")), timeout=30)
    token = ""
    seen = set()
    for _ in range(10):  # pages of 1000
        a = c.get("/v1/jobs?all=true&page_size=1000" + ("&page_token=" + token if token else ""))
        if a.status != 200:
            break
        seen.update(j["name"] for j in a.json["jobs"])
        token = a.json.get("next_page_token")
        if not token:
            break
    missing = [n for n in names if n not in seen]
    rep.check("after the replacement and a leader kill all %d acknowledged jobs are there on %s "
              "(missing %s)" % (len(names), lead, missing[:3]), not missing)
    return None


def submit_failover(c, prefix, n, rep, budget_s=180):
    """n submits, each sent to the replica that leads now (c.request finds it again after a
    redirect, a not_leader answer or a lost connection), each with an Idempotency-Key so that
    a resend after a lost answer is one job; any other failure is resent with the same key
    (bounded by budget_s in all). Returns the acknowledged names and the longest wait for one
    acknowledgement."""
    names, worst, fails = [], 0.0, []
    deadline = time.monotonic() + budget_s
    for i in range(n):
        name = "%s-%d" % (prefix, i)
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            try:
                a = c.request("POST", "/v1/jobs", body={
                    "name": name, "command": ["/bin/true"], "node_selector": {"pool": "none"}},
                    headers={"Idempotency-Key": name}, timeout=5)
            except OSError as e:
                a = None
                fails.append(str(e)[:80])
            if a is not None and a.status in (200, 201):
                names.append(name)
                break
            if a is not None:
                fails.append("%s %s" % (a.status, a.text[:80]))
            time.sleep(0.1)
        worst = max(worst, time.monotonic() - t0)
    rep.check("%d of %d submits acknowledged (failures on the way: %d, first %s)"
              % (len(names), n, len(fails), fails[:2]), len(names) == n)
    return names, worst


def all_job_names(c):
    token, seen, count = "", set(), 0
    for _ in range(10):  # pages of 1000
        a = c.request("GET", "/v1/jobs?all=true&page_size=1000" +
                      ("&page_token=" + token if token else ""))
        if a.status != 200:
            break
        for j in a.json["jobs"]:
            seen.add(j["name"])
            count += 1
        token = a.json.get("next_page_token")
        if not token:
            break
    return seen, count


def scenario_leaderfull(c, rep):
    """The leader's own data on a 64 MiB tmpfs, filled once the cluster formed; then 3,000
    submits through whichever replica leads: the first that fails in the leader's disk makes
    it retire and hand the leadership over (or, where the transfer fails, stop: the others
    elect), and every submit is acknowledged, each job once."""
    full_disk_cluster(c, rep, "r1")
    t0 = time.monotonic()
    names, worst = submit_failover(c, "L", 3000, rep)
    rep.figure("leaderfull_submits_s", "%.1f" % (time.monotonic() - t0))
    rep.figure("leaderfull_longest_wait_s", "%.2f" % worst)
    p1 = c.rep["r1"]["proc"]
    log1 = c.log("ddpd-r1.log")
    if p1.poll() is None:
        h = c.health("r1")
        how = "follows (%s)" % (h and h["role"])
        stepped = h is not None and h["role"] == "follower"
    else:
        how = "exited %s" % p1.returncode
        stepped = p1.returncode == 1 and "can neither serve" in log1
    rep.check("r1 stopped leading: it %s, having said its disk failed" % how,
              stepped and "this replica's disk failed a write" in log1, log1[-1500:])
    lead = wait_for("r2 or r3 leads", lambda: c.leader(("r2", "r3")), timeout=30)
    rep.check("%s leads" % lead, lead in ("r2", "r3"))
    seen, count = all_job_names(c)
    missing = [n for n in names if n not in seen]
    rep.check("every acknowledged job is there (missing %s), none twice (%d rows, %d names)"
              % (missing[:3], count, len(seen)), not missing and count == len(seen))
    return None


def scenario_leaderalone(c, rep):
    """The leader's disk full while one of the two others is down: the one left cannot elect
    alone, so stopping the leader would take the quorum away and gain nothing. r1 neither
    stops nor hands over; it stays up, saying why; once its disk has room again (r3 still
    down) writes are taken again, and every acknowledged job is there once."""
    import http.client
    data = full_disk_cluster(c, rep, "r1")
    c.kill_replica("r3")
    c.rep["r3"]["proc"] = None
    host, port = c.rep["r1"]["listen"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    names, refused = [], None
    for i in range(3000):  # dqlite's preallocated segments take about 1,500
        name = "A-%d" % i
        conn.request("POST", "/v1/jobs", body=json.dumps(
            {"name": name, "command": ["/bin/true"], "node_selector": {"pool": "none"}}),
            headers={"Authorization": "Bearer " + c.user_token,
                     "Content-Type": "application/json", "Idempotency-Key": name})
        r = conn.getresponse()
        body = r.read()
        if r.status != 201:
            refused = (r.status, body[:160])
            break
        names.append(name)
    conn.close()
    rep.check("r1 refuses a write once its disk is full (after %d: %s)" % (len(names), refused),
              refused is not None)
    log1 = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        log1 = c.log("ddpd-r1.log")
        if "no majority without this node" in log1:
            break
        time.sleep(0.2)
    time.sleep(2)  # a poll or two more: it must not stop meanwhile
    p1 = c.rep["r1"]["proc"]
    rep.check("r1 stays up (%s), saying the others that answer are no majority without it"
              % ("running" if p1.poll() is None else "exited %s" % p1.returncode),
              p1.poll() is None and "no majority without this node" in log1 and
              "can neither serve" not in log1, log1[-1500:])
    # room again (r3 still down): r1 and r2 are a quorum, and r1 serves
    os.unlink(os.path.join(data, "fill"))
    more, worst = submit_failover(c, "B", 50, rep, budget_s=120)
    rep.figure("leaderalone_first_write_after_s", "%.2f" % worst)
    seen, count = all_job_names(c)
    missing = [n for n in names + more if n not in seen]
    rep.check("every acknowledged job is there (missing %s), none twice (%d rows, %d names)"
              % (missing[:3], count, len(seen)), not missing and count == len(seen))
    return None


def main():
    def on_term(signum, frame):
        raise SystemExit("killed by signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    name = sys.argv[1] if len(sys.argv) > 1 else "ha"
    fn = {"ha": scenario, "diskfull": scenario_diskfull,
          "leaderfull": scenario_leaderfull, "leaderalone": scenario_leaderalone}.get(name)
    if fn is None:
        print(__doc__)
        return 2
    return run_scenario(name, list(REPLICAS) + ["a", "b"], HACluster, fn)


if __name__ == "__main__":
    sys.exit(main())
