"""bench/ha: three ddpd replicas (--cluster) on 127.0.0.1 against one ddpd on its SQLite file
(--db), in one run; prints one table and the goal ratios. See README.md.

  1. failover: kill -9 of the leader to the first POST /v1/jobs accepted (a client that walks
     the three addresses itself, following 307 and not_leader, one Idempotency-Key per
     submit); median and max of BENCH_KILLS kills, the killed replica restarted and followed
     between kills; at dqlite's default timers and at --raft-latency-ms 20.
  2. submit latency: BENCH_SUBMITS sequential POST /v1/jobs (PENDING: node_selector
     pool=none) on one keep-alive connection to the leader, --cluster vs --db.
  3. GET /v1/jobs/{id} per second: BENCH_GET_PROCS client processes, one keep-alive
     http.client connection each, BENCH_GET_S seconds, on the leader, --cluster vs --db.
  4. heartbeats of BENCH_NODES simulated nodes at 1 Hz (wait_ms 0) for BENCH_BEAT_S seconds
     against the cluster (--raft-latency-ms 20), the leader killed -9 at BENCH_BEAT_KILL_S:
     latency before and after, the beats that failed, the outage.

Python 3 standard library only. Every wait is bounded, every process started is killed at
the end (also on failure or SIGINT/SIGTERM), the temporary folder removed.

usage: ha.py DDP_BIN            (the worker modes --get-worker / --beat-worker are internal)
"""
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

KILLS = int(os.environ.get("BENCH_KILLS", "5"))
SUBMITS = int(os.environ.get("BENCH_SUBMITS", "500"))
GET_PROCS = int(os.environ.get("BENCH_GET_PROCS", "4"))
GET_S = float(os.environ.get("BENCH_GET_S", "5"))
NODES = int(os.environ.get("BENCH_NODES", "1000"))
BEAT_S = float(os.environ.get("BENCH_BEAT_S", "20"))
BEAT_KILL_S = float(os.environ.get("BENCH_BEAT_KILL_S", "10"))
BEAT_PROCS = int(os.environ.get("BENCH_BEAT_PROCS", "4"))
BEAT_THREADS = int(os.environ.get("BENCH_BEAT_THREADS", "4"))
FAST_MS = 20
PENDING = {"command": ["/bin/true"], "node_selector": {"pool": "none"}}


def log(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs, or None."""
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def hostport(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port


class Client:
    """One keep-alive connection to one base URL; request() answers (status, headers, body
    dict or None) or raises OSError / http.client.HTTPException."""

    def __init__(self, url, timeout=2.0):
        self.url = url
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, token, body=None, headers=None):
        if self.conn is None:
            h, p = hostport(self.url)
            self.conn = http.client.HTTPConnection(h, p, timeout=self.timeout)
        hd = {"Authorization": "Bearer " + token} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body)
            hd["Content-Type"] = "application/json"
        hd.update(headers or {})
        try:
            self.conn.request(method, path, body=data, headers=hd)
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if r.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = None
        return r.status, r, doc


def leader_hint(status, resp, doc):
    """Where a 307 or a 503 not_leader sends the call: a base URL, "" (not_leader naming
    none), or None (not a redirect at all)."""
    if status in (307, 308):
        loc = resp.getheader("Location") or ""
        u = urllib.parse.urlsplit(loc)
        return "%s://%s" % (u.scheme, u.netloc) if u.netloc else ""
    if status == 503 and isinstance(doc, dict):
        err = doc.get("error") or {}
        if err.get("code") == "not_leader":
            return err.get("leader") or ""
    return None


class Walker:
    """A client of several addresses that follows the leader itself: the sticky address
    first; 307 and not_leader followed; a connection failure or not_leader naming none moves
    on to the next address; rounds 10 ms apart; the whole call bounded by `limit` s."""

    def __init__(self, urls, timeout=2.0):
        self.urls = list(urls)
        self.cur = self.urls[0]
        self.clients = {}
        self.timeout = timeout
        self.last_start = 0.0

    def client(self, url):
        c = self.clients.get(url)
        if c is None:
            c = self.clients[url] = Client(url, self.timeout)
        return c

    def close(self):
        for c in self.clients.values():
            c.close()

    def call(self, method, path, token, body=None, headers=None, limit=60.0, ok=(200, 201)):
        """(status, doc, failed attempts) of the first answer in `ok`; raises after limit."""
        deadline = time.monotonic() + limit
        fails = 0
        url = self.cur
        hops = 0
        while True:
            self.last_start = time.monotonic()
            try:
                st, resp, doc = self.client(url).request(method, path, token, body, headers)
            except (OSError, http.client.HTTPException):
                st, resp, doc = None, None, None
            if st in ok:
                self.cur = url
                return st, doc, fails
            fails += 1
            hint = leader_hint(st, resp, doc) if st is not None else ""
            if st is not None and hint is None:
                raise RuntimeError("%s %s on %s: %s %s" % (method, path, url, st, doc))
            if time.monotonic() > deadline:
                raise RuntimeError("%s %s: no leader accepted it within %.0f s" % (
                    method, path, limit))
            if hint and hops < 3:
                url, hops = hint, hops + 1
                continue
            hops = 0
            i = self.urls.index(url) if url in self.urls else -1
            url = self.urls[(i + 1) % len(self.urls)]
            if url == self.urls[0]:
                time.sleep(0.01)


class Procs:
    """Every process this run started, in its own process group, killed at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.all = []

    def spawn(self, argv, logname, env=None):
        e = dict(os.environ)
        e.update(env or {})
        f = open(os.path.join(self.tmp, logname), "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=e, start_new_session=True)
        f.close()
        self.all.append(p)
        return p

    def kill9(self, p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)

    def stop(self, p):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill9(p)

    def stop_all(self):
        for p in self.all:
            try:
                self.stop(p)
            except Exception:  # noqa: BLE001 - go on with the others
                pass


def wait_for(what, fn, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def healthz(url):
    try:
        c = Client(url, 1.0)
        st, _, doc = c.request("GET", "/healthz", None)
        c.close()
        return doc if st == 200 and isinstance(doc, dict) else None
    except (OSError, http.client.HTTPException):
        return None


class Single:
    """One ddpd on its SQLite file."""

    def __init__(self, env):
        self.env = env
        port = free_port()
        self.url = "http://127.0.0.1:%d" % port
        home = os.path.join(env.tmp, "single")
        os.makedirs(home)
        self.p = env.procs.spawn(
            [env.ddpd, "--db", os.path.join(home, "ddp.db"), "--listen", "127.0.0.1:%d" % port,
             "--node-timeout", "3600", "--token-file", env.user_file,
             "--agent-token-file", env.agent_file], "ddpd-single.log", {"DDP_HOME": home})
        wait_for("ddpd --db /healthz", lambda: self.alive() and healthz(self.url), 30)

    def alive(self):
        if self.p.poll() is not None:
            raise RuntimeError("ddpd --db exited %s:\n%s" % (self.p.returncode,
                                                              self.env.tail("ddpd-single.log")))
        return True

    def leader(self):
        return self.url

    def close(self):
        self.env.procs.stop(self.p)


class Cluster:
    """Three replicas r1..r3 (r1 founds, r2 and r3 join), as tests/faults/test_ha.py."""

    def __init__(self, env, name, latency_ms):
        self.env, self.name, self.latency = env, name, latency_ms
        self.rep = {}
        for i in (1, 2, 3):
            port, rport = free_port(), free_port()
            self.rep[i] = {"url": "http://127.0.0.1:%d" % port, "listen": "127.0.0.1:%d" % port,
                           "raft": "127.0.0.1:%d" % rport, "p": None,
                           "home": os.path.join(env.tmp, "%s-r%d" % (name, i))}
        self.urls = [self.rep[i]["url"] for i in (1, 2, 3)]
        self.start(1)
        wait_for("r1 leads", lambda: self.leader([1]), 30)
        self.start(2)
        self.start(3)
        wait_for("one leader that both others follow", self.leader, 60)

    def log(self, i):
        return "ddpd-%s-r%d.log" % (self.name, i)

    def start(self, i):
        x = self.rep[i]
        os.makedirs(x["home"], exist_ok=True)
        argv = [self.env.ddpd, "--cluster", "--node-id", str(i), "--raft-address", x["raft"],
                "--listen", x["listen"], "--node-timeout", "3600",
                "--token-file", self.env.user_file, "--agent-token-file", self.env.agent_file]
        if self.latency:
            argv += ["--raft-latency-ms", str(self.latency)]
        if i != 1:
            argv += ["--join", ",".join(self.rep[o]["raft"] for o in (1, 2, 3) if o != i)]
        x["p"] = self.env.procs.spawn(argv, self.log(i), {"DDP_HOME": x["home"]})
        wait_for("r%d /healthz" % i, lambda: self.up(i) and healthz(x["url"]), 40)

    def up(self, i):
        p = self.rep[i]["p"]
        if p is not None and p.poll() is not None:
            raise RuntimeError("ddpd %s r%d exited %s:\n%s" % (
                self.name, i, p.returncode, self.env.tail(self.log(i))))
        return p is not None

    def kill9(self, i):
        self.env.procs.kill9(self.rep[i]["p"])
        self.rep[i]["p"] = None

    def leader_id(self, among=(1, 2, 3)):
        """The replica that says it leads and that every other live one follows, or None."""
        roles = {}
        for i in among:
            if self.rep[i]["p"] is None:
                continue
            self.up(i)
            h = healthz(self.rep[i]["url"])
            if h is None:
                return None
            roles[i] = h
        leads = [i for i, h in roles.items() if h.get("role") == "leader"]
        if len(leads) != 1:
            return None
        lu = self.rep[leads[0]]["url"]
        if any(h.get("role") != "leader" and h.get("leader") != lu for h in roles.values()):
            return None
        return leads[0]

    def leader(self, among=(1, 2, 3)):
        i = self.leader_id(among)
        return self.rep[i]["url"] if i else None

    def close(self):
        for i in (1, 2, 3):
            if self.rep[i]["p"] is not None:
                self.env.procs.stop(self.rep[i]["p"])


class Env:
    def __init__(self, bin_dir):
        self.ddpd = os.path.join(bin_dir, "ddpd")
        self.tmp = tempfile.mkdtemp(prefix="ddp-bench-ha.")
        self.procs = Procs(self.tmp)
        self.user = secrets.token_hex(32)
        self.agent = secrets.token_hex(32)
        self.user_file = os.path.join(self.tmp, "user.token")
        self.agent_file = os.path.join(self.tmp, "agent.token")
        for path, tok in ((self.user_file, self.user), (self.agent_file, self.agent)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, tok.encode())
            os.close(fd)

    def tail(self, name, n=3000):
        try:
            return open(os.path.join(self.tmp, name), errors="replace").read()[-n:]
        except OSError:
            return ""

    def close(self):
        self.procs.stop_all()
        if os.environ.get("BENCH_KEEP") == "1":
            log("BENCH_KEEP=1: the logs are kept in " + self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


# -- the measurements --------------------------------------------------------------------------

def submit_latency(env, srv, tag):
    """SUBMITS sequential submits on one keep-alive connection to the leader: ms each."""
    c = Client(srv.leader(), 5.0)
    out = []
    for k in range(SUBMITS):
        body = dict(PENDING, name="lat-%s-%d" % (tag, k))
        t = time.perf_counter()
        st, _, doc = c.request("POST", "/v1/jobs", env.user, body)
        out.append((time.perf_counter() - t) * 1000.0)
        if st != 201:
            raise RuntimeError("submit %d on %s: %s %s" % (k, srv.leader(), st, doc))
    st, _, doc = c.request("POST", "/v1/jobs", env.user, dict(PENDING, name="get-" + tag))
    c.close()
    return out, doc["id"]


def cpu_s(pid):
    """User + system CPU seconds of process pid (all its threads) so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get_rate(env, srv, job, pid):
    """GET_PROCS processes, each one keep-alive connection, GET_S seconds: (GET/s, errors,
    GETs per CPU-second of ddpd pid, the cores ddpd used). GET/s is set by whoever runs out
    of CPU first; the clients are Python, so the second figure says what ddpd costs."""
    start = time.monotonic() + 0.5
    ws = [env.procs.spawn([sys.executable, os.path.abspath(__file__), "--get-worker",
                           srv.leader(), env.user_file, job, "%f" % start, "%f" % GET_S],
                          "get-%d.out" % k) for k in range(GET_PROCS)]
    while time.monotonic() < start:
        time.sleep(0.005)
    c0 = cpu_s(pid)
    n = errs = 0
    for k, p in enumerate(ws):
        p.wait(timeout=GET_S + 30)
        words = env.tail("get-%d.out" % k).split()
        os.unlink(os.path.join(env.tmp, "get-%d.out" % k))
        if p.returncode != 0 or len(words) != 2:
            raise RuntimeError("GET worker %d: rc %s: %s" % (k, p.returncode, " ".join(words)))
        n += int(words[0])
        errs += int(words[1])
    used = cpu_s(pid) - c0
    return n / GET_S, errs, (n / used if used > 0 else 0.0), used / GET_S


def get_worker(url, token_file, job, start, secs):
    token = open(token_file).read().strip()
    c = Client(url, 5.0)
    n = errs = 0
    while time.monotonic() < start:
        time.sleep(0.005)
    end = start + secs
    path = "/v1/jobs/" + job
    while time.monotonic() < end:
        try:
            st, _, _ = c.request("GET", path, token)
            if st == 200:
                n += 1
            else:
                errs += 1
        except (OSError, http.client.HTTPException):
            errs += 1
    print(n, errs)


def failover(env, cl):
    """KILLS times: kill -9 of the leader, then submits walked over the three addresses until
    one is accepted (s from the kill); the killed replica restarted until it follows."""
    out = []
    for k in range(KILLS):
        lead = wait_for("a leader followed by all", cl.leader_id, 60)
        w = Walker(cl.urls)
        w.cur = cl.rep[lead]["url"]
        key = "bench-ha-%s-%d-%s" % (cl.name, k, secrets.token_hex(4))
        t = time.monotonic()
        cl.kill9(lead)
        w.call("POST", "/v1/jobs", env.user, dict(PENDING, name="fail-%s-%d" % (cl.name, k)),
               headers={"Idempotency-Key": key}, limit=60.0)
        out.append(time.monotonic() - t)
        w.close()
        log("%s: kill %d of %d (r%d): first submit accepted after %.3f s" % (
            cl.name, k + 1, KILLS, lead, out[-1]))
        cl.start(lead)
        wait_for("r%d follows" % lead, lambda: (lambda h: h and h.get("role") == "follower"
                                                and h.get("leader"))(
            healthz(cl.rep[lead]["url"])), 60)
    wait_for("a leader followed by all", cl.leader_id, 60)
    return out


def register_nodes(env, cl):
    """NODES nodes bn-<i> as bench/api/setup_nodes.py registers them; their credentials."""
    w = Walker(cl.urls)
    w.cur = cl.leader()
    creds = []
    for i in range(NODES):
        _, doc, _ = w.call("POST", "/v1/nodes:register", env.agent, {
            "name": "bn-%d" % i, "address": "127.0.0.1", "slots": 1,
            "port_range": "29500-29999", "incarnation": "inc-%d" % i}, limit=30.0)
        creds.append(doc["credential"])
    w.close()
    return creds


BEAT_ROUTE = 'route="/v1/nodes/{name}:heartbeat",method="POST"'


def beat_histogram(url):
    """The heartbeat route's ddp_http_long_poll_duration_seconds buckets (a beat is a long
    poll, answered at once with wait_ms 0) on one replica, from its /metrics: [(le seconds,
    cumulative count)], or None where it does not answer."""
    h, p = hostport(url)
    conn = http.client.HTTPConnection(h, p, timeout=5.0)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        st, body = r.status, r.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    if st != 200:
        return None
    out = []
    for line in body.decode().splitlines():
        if line.startswith("ddp_http_long_poll_duration_seconds_bucket{") and BEAT_ROUTE in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out.append((float("inf") if le == "+Inf" else float(le), int(line.split()[-1])))
    return sorted(out)


def hist_p99_bound(h):
    """The bucket bound (ms) at or under which 99% of h's requests were answered: a bound
    on ddpd's own p99, the time from request to response inside ddpd."""
    if not h or h[-1][1] == 0:
        return None
    for le, n in h:
        if n >= 0.99 * h[-1][1]:
            return le * 1000
    return None


def heartbeats(env, cl, creds):
    """BEAT_PROCS processes x BEAT_THREADS threads beat NODES nodes once a second each for
    BEAT_S s; the leader killed -9 at BEAT_KILL_S. Answers the beats' records and t_kill."""
    t0 = time.monotonic() + 1.0
    cfg_path = os.path.join(env.tmp, "beat.json")
    nodes = [{"name": "bn-%d" % i, "inc": "inc-%d" % i, "cred": creds[i],
              "off": (i % NODES) / float(NODES)} for i in range(NODES)]
    ws = []
    for k in range(BEAT_PROCS):
        cfg = {"urls": cl.urls, "leader": cl.leader(), "t0": t0, "secs": BEAT_S,
               "threads": BEAT_THREADS, "nodes": nodes[k::BEAT_PROCS],
               "out": os.path.join(env.tmp, "beat-%d.json" % k)}
        with open(cfg_path + ".%d" % k, "w") as f:
            json.dump(cfg, f)
        ws.append(env.procs.spawn([sys.executable, os.path.abspath(__file__), "--beat-worker",
                                   cfg_path + ".%d" % k], "beat-%d.log" % k))
    lead = cl.leader_id()
    while time.monotonic() < t0 + BEAT_KILL_S:
        time.sleep(0.01)
    hist_before = beat_histogram(cl.rep[lead]["url"])
    t_kill = time.monotonic()
    cl.kill9(lead)
    log("heartbeats: leader r%d killed at %.1f s" % (lead, t_kill - t0))
    recs = []
    for k, p in enumerate(ws):
        p.wait(timeout=BEAT_S + 90)
        if p.returncode != 0:
            raise RuntimeError("beat worker %d: rc %s\n%s" % (k, p.returncode,
                                                              env.tail("beat-%d.log" % k)))
        with open(os.path.join(env.tmp, "beat-%d.json" % k)) as f:
            recs += json.load(f)
    new = cl.leader_id(among=[i for i in (1, 2, 3) if i != lead])
    hist_after = beat_histogram(cl.rep[new]["url"]) if new else None
    return recs, t_kill, t0, (hist_before, hist_after)


def beat_worker(cfg_path):
    """Threads, each a share of the nodes: every node beats at t0 + off + n s; a beat not
    answered 200 (connection lost, 307, not_leader) is re-sent (walking the addresses as the
    agents do) until it is, at most 30 s. Writes [due, first send, sent, done, failed
    attempts, ok] per beat (monotonic s)."""
    import threading
    cfg = json.load(open(cfg_path))
    token_of = {n["name"]: n["cred"] for n in cfg["nodes"]}
    recs = []
    lock = threading.Lock()

    def run(nodes):
        w = Walker(cfg["urls"], timeout=2.0)
        w.cur = cfg["leader"]
        sched = sorted((cfg["t0"] + n["off"], n) for n in nodes)
        end = cfg["t0"] + cfg["secs"]
        mine = []
        rnd = 0
        while cfg["t0"] + rnd < end:
            for off_t, n in sched:
                due = off_t + rnd
                if due >= end:
                    break
                now = time.monotonic()
                if now < due:
                    time.sleep(due - now)
                first = time.monotonic()
                body = {"incarnation": n["inc"], "version": 0, "wait_ms": 0, "workers": []}
                try:
                    _, _, fails = w.call("POST", "/v1/nodes/%s:heartbeat" % n["name"],
                                         token_of[n["name"]], body, limit=30.0)
                    ok = 1
                except RuntimeError as e:
                    print("beat %s: %s" % (n["name"], e), file=sys.stderr, flush=True)
                    ok, fails = 0, -1
                # the latency is the one of the attempt that was answered (w.last_start)
                mine.append((due, first, w.last_start, time.monotonic(), fails, ok))
            rnd += 1
        w.close()
        with lock:
            recs.extend(mine)

    ts = []
    k = cfg["threads"]
    for j in range(k):
        t = threading.Thread(target=run, args=(cfg["nodes"][j::k],))
        t.start()
        ts.append(t)
    for t in ts:
        t.join(timeout=cfg["secs"] + 80)
    with open(cfg["out"], "w") as f:
        json.dump(recs, f)


# -- the report ---------------------------------------------------------------------------------

def fmt(v, spec="%.2f"):
    return "-" if v is None else spec % v


def main(bin_dir):
    env = Env(bin_dir)
    res = {}

    def on_term(signum, frame):
        raise SystemExit("bench/ha: killed by signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    srv = None
    try:
        log("ddpd --db: %d submits, GET/s for %.0f s" % (SUBMITS, GET_S))
        srv = Single(env)
        res["db_sub"], job = submit_latency(env, srv, "db")
        res["db_get"] = get_rate(env, srv, job, srv.p.pid)
        srv.close()

        log("--cluster, dqlite's default timers: %d leader kills" % KILLS)
        srv = Cluster(env, "default", None)
        res["fail_default"] = failover(env, srv)
        srv.close()

        log("--cluster --raft-latency-ms %d: %d submits, GET/s, %d leader kills" % (
            FAST_MS, SUBMITS, KILLS))
        srv = Cluster(env, "fast", FAST_MS)
        res["cl_sub"], job = submit_latency(env, srv, "cl")
        res["cl_get"] = get_rate(env, srv, job, srv.rep[srv.leader_id()]["p"].pid)
        res["fail_fast"] = failover(env, srv)

        log("heartbeats: registering %d nodes" % NODES)
        creds = register_nodes(env, srv)
        log("heartbeats: %d nodes at 1 Hz for %.0f s, leader kill at %.0f s" % (
            NODES, BEAT_S, BEAT_KILL_S))
        res["beats"] = heartbeats(env, srv, creds)
        srv.close()
        srv = None
    finally:
        env.close()
    report(res)
    return 0


def report(res):
    load = os.getloadavg()
    print()
    print("bench/ha on 127.0.0.1: %d CPUs, load average %.1f %.1f %.1f at the end" % (
        os.cpu_count(), *load))
    print("%-58s %12s %12s" % ("figure", "--cluster", "--db"))
    fd, ff = res["fail_default"], res["fail_fast"]
    print("%-58s %12s %12s" % ("failover, kill -9 to first submit, default timers: median s",
                               "%.3f" % statistics.median(fd), "-"))
    print("%-58s %12s %12s" % ("   max s (%d kills)" % len(fd), "%.3f" % max(fd), "-"))
    print("%-58s %12s %12s" % ("failover, --raft-latency-ms %d: median s" % FAST_MS,
                               "%.3f" % statistics.median(ff), "-"))
    print("%-58s %12s %12s" % ("   max s (%d kills)" % len(ff), "%.3f" % max(ff), "-"))
    cs, ds = res["cl_sub"], res["db_sub"]
    print("%-58s %12.2f %12.2f" % ("submit latency p50 ms (%d sequential)" % len(cs),
                                   pct(cs, 50), pct(ds, 50)))
    print("%-58s %12.2f %12.2f" % ("submit latency p99 ms", pct(cs, 99), pct(ds, 99)))
    (cg, cge, cgc, cgu), (dg, dge, dgc, dgu) = res["cl_get"], res["db_get"]
    print("%-58s %12.0f %12.0f" % ("GET /v1/jobs/{id} per s (%d procs x 1 conn, %.0f s)" % (
        GET_PROCS, GET_S), cg, dg))
    print("%-58s %12.0f %12.0f" % ("   GETs per CPU-second of the serving ddpd", cgc, dgc))
    print("%-58s %12.2f %12.2f" % ("   cores the serving ddpd used meanwhile", cgu, dgu))
    recs, t_kill, t0, (hist_before, hist_after) = res["beats"]
    before = [(r[3] - r[2]) * 1000 for r in recs if r[5] and r[1] < t_kill]
    after_ok = [r for r in recs if r[5] and r[1] >= t_kill]
    failed = [r for r in recs if r[4] != 0]
    lost = [r for r in recs if not r[5]]
    first_ok = min((r[3] for r in recs if r[5] and r[4] == 0 and r[1] >= t_kill), default=None)
    gap = (first_ok - t_kill) if first_ok else None
    recovered_t = max((r[3] for r in failed), default=None)
    steady = [(r[3] - r[2]) * 1000 for r in after_ok if gap is not None and
              r[1] >= t_kill + gap + 1.0]
    straddle = [(r[3] - r[0]) * 1000 for r in recs if r[5] and r[0] >= t_kill - 2.5 and
                r[0] < t_kill + (gap or 0) + 1.0]
    n_before = len([r for r in recs if r[0] < t_kill])
    span_before = t_kill - t0
    rate = n_before / span_before if span_before > 0 else 0
    print("%-58s %12.0f %12s" % ("heartbeats sent per s before the kill (%d nodes at 1 Hz)" %
                                 NODES, rate, "-"))
    print("%-58s %12s %12s" % ("beat p50 / p99 ms before the kill", "%s / %s" % (
        fmt(pct(before, 50)), fmt(pct(before, 99))), "-"))
    print("%-58s %12s %12s" % ("beat p50 / p99 ms after the new leader (from +1 s)", "%s / %s" % (
        fmt(pct(steady, 50)), fmt(pct(steady, 99))), "-"))
    print("%-58s %12s %12s" % ("beat p99 inside ddpd, old / new leader: bucket <= ms",
                               "%s / %s" % (fmt(hist_p99_bound(hist_before), "%g"),
                                            fmt(hist_p99_bound(hist_after), "%g")), "-"))
    print("%-58s %12s %12s" % ("beats due around the kill: due to answered p99 / max ms",
                               "%s / %s" % (fmt(pct(straddle, 99), "%.0f"),
                                            fmt(max(straddle) if straddle else None, "%.0f")),
                               "-"))
    print("%-58s %12d %12s" % ("beats that failed at least once (re-sent)", len(failed), "-"))
    print("%-58s %12d %12s" % ("failed attempts in all", sum(r[4] for r in recs if r[5]), "-"))
    print("%-58s %12d %12s" % ("beats never answered (30 s)", len(lost), "-"))
    print("%-58s %12s %12s" % ("outage: kill to first beat answered on the first try, s",
                               fmt(gap, "%.3f"), "-"))
    print("%-58s %12s %12s" % ("kill to the last re-sent beat answered, s",
                               fmt((recovered_t - t_kill) if recovered_t else None, "%.3f"), "-"))
    late = [r for r in recs if r[1] >= t_kill and r[1] - r[0] >= 0.05]
    behind = (max(r[1] for r in late) - t_kill) if late else 0.0
    print("%-58s %12.3f %12s" % ("kill to the last beat sent >= 50 ms behind its time, s",
                                 behind, "-"))
    print()
    print("heartbeats by the second of their first send, from the kill (late: first send "
          "after the beat's time)")
    print("%7s %7s %7s %9s %9s %11s" % ("second", "beats", "failed", "p50 ms", "p99 ms",
                                        "late max ms"))
    first_s = int(-min(BEAT_KILL_S, 3))
    last_s = int(max(r[1] for r in recs) - t_kill)
    for sec in range(first_s, last_s + 1):
        b = [r for r in recs if sec <= r[1] - t_kill < sec + 1]
        if not b:
            continue
        lat = [(r[3] - r[2]) * 1000 for r in b if r[5]]
        print("%7d %7d %7d %9s %9s %11.0f" % (sec, len(b), len([r for r in b if r[4]]),
                                              fmt(pct(lat, 50)), fmt(pct(lat, 99)),
                                              max(r[1] - r[0] for r in b) * 1000))
    print()
    p99c = pct(cs, 99)
    print("goal cluster submit p99 <= 10 ms:       %.2f ms, ratio goal/measured %.2f; "
          "cluster/db p99 %.2f, p50 %.2f" % (p99c, 10.0 / p99c, p99c / pct(ds, 99),
                                             pct(cs, 50) / pct(ds, 50)))
    print("goal GET/s cluster/db >= 0.8:           %.2f (errors: cluster %d, db %d); per "
          "CPU-second of ddpd %.2f" % (cg / dg, cge, dge, cgc / dgc if dgc else 0.0))
    p99b = pct(steady, 99)
    worst = max(straddle) if straddle else None
    print("goal beat p99 <= 20 ms through a leader change: before %s ms, after %s ms, "
          "but beats due in the outage waited up to %s ms; inside ddpd p99 <= %s / %s ms" % (
              fmt(pct(before, 99)), fmt(p99b), fmt(worst, "%.0f"),
              fmt(hist_p99_bound(hist_before), "%g"), fmt(hist_p99_bound(hist_after), "%g")))
    print("failover default/fast median: %.1fx" % (statistics.median(fd) / statistics.median(ff)))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--get-worker":
        get_worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]),
                   float(sys.argv[6]))
        sys.exit(0)
    if len(sys.argv) >= 2 and sys.argv[1] == "--beat-worker":
        beat_worker(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
