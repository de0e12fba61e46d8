"""A real local cluster for integration tests: a real ddpd on a real SQLite file in a fresh
temporary DDP_HOME, real ddp-agent processes as nodes, talking over loopback.

Every wait is bounded (poll with a deadline, never sleep-and-hope) and every process this
module starts is stopped by Cluster.stop() (use `with Cluster() as c:`), killed by process
group if it does not stop in time. Binaries come from $DDP_BIN (set by ctest), else
<repo>/build/bin.
"""
import json
import re
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("DDP_BIN") or os.path.join(REPO, "build", "bin")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_range(width=40):
    """A random worker port range "A-B" whose ports are free now, so that concurrent tests'
    jobs do not meet on the same MASTER_PORT; below the kernel's ephemeral range, where no
    client socket of another test is given one of them (a worker's bind would fail)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            top = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        top = 32768
    top = max(top, 10000 + 2 * width)
    for _ in range(200):
        lo = random.randrange(10000, top - width)
        ok = True
        for p in (lo, lo + 1, lo + width // 2):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return "%d-%d" % (lo, lo + width - 1)
    raise RuntimeError("no free port range found")


def wait_for(what, fn, timeout=30.0, interval=0.05):
    """Calls fn until it returns something true, at most `timeout` seconds; returns that value
    or raises AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what, last))


CGROUP_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer",
                 "/sys/fs/cgroup/pids")


def agent_cgroup_name(name, work_dir):
    """The name of an agent's parent cgroup (agent/cgroup.c, cgroup_parent_name): its node
    name and the FNV-1a hash of its absolute work dir."""
    h = 2166136261
    for b in os.path.realpath(work_dir).encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return "ddp-agent-%s-%08x" % (name, h)


def remove_empty_cgroups(name, work_dir):
    """Removes the parent cgroup an agent left (one killed with SIGKILL cannot remove its
    own) and its job cgroups, where they are empty: rmdir only, nothing is killed."""
    cg = agent_cgroup_name(name, work_dir)
    for mnt in CGROUP_MOUNTS:
        parent = os.path.join(mnt, cg)
        if not os.path.isdir(parent):
            continue
        for d in os.listdir(parent)[:1000]:
            if d.startswith("job-"):
                try:
                    os.rmdir(os.path.join(parent, d))
                except OSError:
                    pass
        try:
            os.rmdir(parent)
        except OSError:
            pass


def isolation_args(extra):
    """Test agents run every job as their own user (--isolation single-user) unless the test
    asks otherwise: as root an agent would run each job as its owner's local account, and the
    tests' users (admin, ...) have none. test_agent_runas.py passes --user-map."""
    if os.geteuid() != 0 or any(a in ("--isolation", "--user-map") for a in extra):
        return []
    return ["--isolation", "single-user"]


def wait_pid_files(out, n, what="%d workers running", timeout=60):
    """Waits until folder out holds rank-0.pid .. rank-(n-1).pid (the tests' workers write
    each whole, by a rename) and returns, by rank, the pids each file lists."""
    wait_for(what % n, lambda: len([f for f in os.listdir(out) if f.endswith(".pid")]) == n,
             timeout=timeout)
    pids = []
    for r in range(n):
        with open(os.path.join(out, "rank-%d.pid" % r)) as f:
            pids.append([int(x) for x in f.read().split()])
    return pids


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie counts as gone
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Answer:
    def __init__(self, status, body, headers):
        self.status = status
        self.text = body
        self.headers = headers
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return "Answer(%d, %s)" % (self.status, self.text[:300])


class Cluster:
    """ddpd plus any number of agents. Attributes: url, home, user_token, agent_token."""

    def __init__(self, node_timeout=5, ddpd_args=(), home=None):
        self.tmp = tempfile.mkdtemp(prefix="ddp-test-")
        self.home = home or os.path.join(self.tmp, "home")
        os.makedirs(self.home, exist_ok=True)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.node_timeout = node_timeout
        self.ddpd_args = list(ddpd_args)
        self.ddpd = None
        self.agents = {}
        self.agent_work = {}
        self.procs = []
        self.user_token = None
        self.agent_token = None
        self.node_creds = {}  # node name -> the credential of its last registration

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self):
        self.start_ddpd()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _spawn(self, argv, log_name, env=None):
        log = open(os.path.join(self.tmp, log_name), "ab")
        e = dict(os.environ)
        e["DDP_HOME"] = self.home
        if env:
            e.update(env)
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=e,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def start_ddpd(self, extra=()):
        argv = [os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % self.port,
                "--node-timeout", str(self.node_timeout)] + self.ddpd_args + list(extra)
        self.ddpd = self._spawn(argv, "ddpd.log")
        wait_for("ddpd /healthz", lambda: self._healthy(), timeout=20)
        self.user_token = open(os.path.join(self.home, "user.token")).read().strip()
        self.agent_token = open(os.path.join(self.home, "agent.token")).read().strip()
        return self.ddpd

    def _healthy(self):
        if self.ddpd.poll() is not None:
            raise AssertionError("ddpd exited with %s; log:\n%s" % (self.ddpd.returncode,
                                                                   self.log("ddpd.log")))
        try:
            return self.request("GET", "/healthz", token=None).status == 200
        except OSError:
            return False

    def kill_ddpd(self, sig=signal.SIGKILL):
        self.ddpd.send_signal(sig)
        self.ddpd.wait(timeout=10)

    def start_agent(self, name, slots=2, extra=(), env=None):
        work = os.path.join(self.tmp, "agent-" + name)
        os.makedirs(work, exist_ok=True)
        argv = [os.path.join(BIN, "ddp-agent"), "--server", self.url, "--name", name,
                "--address", "127.0.0.1", "--slots", str(slots), "--port-range", port_range(),
                "--work-dir", work, "--token-file", os.path.join(self.home, "agent.token")]
        argv += isolation_args(extra) + list(extra)
        p = self._spawn(argv, "agent-%s.log" % name, env=env)
        self.agents[name] = p
        self.agent_work[name] = work
        return p

    def wait_nodes_ready(self, names, timeout=20):
        def ready():
            a = self.get("/v1/nodes")
            if a.status != 200:
                return False
            st = {n["name"]: n["state"] for n in a.json["nodes"]}
            return all(st.get(n) == "READY" for n in names)
        return wait_for("nodes %s READY" % names, ready, timeout=timeout)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        for name, work in self.agent_work.items():
            remove_empty_cgroups(name, work)
        if os.environ.get("DDP_TEST_KEEP"):
            print("kept test folder", self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- HTTP ------------------------------------------------------------------------------
    def request(self, method, path, body=None, token="user", raw=None, headers=None,
                timeout=30):
        """Sends one request. token: "user" (the admin's), "agent" (the bootstrap token),
        "node" (the credential the node named in the path got at its last registration through
        this Cluster), None (no header) or a literal string. body: a Python value sent as
        JSON; raw: bytes sent as they are."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token == "node":
            m = re.match(r"/v1/nodes/([^/:]+):heartbeat", path)
            tok = self.node_creds.get(m.group(1), "no-credential-yet") if m else None
        else:
            tok = {"user": self.user_token, "agent": self.agent_token}.get(token, token)
        if tok:
            req.add_header("Authorization", "Bearer " + tok)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                a = Answer(r.status, r.read().decode(errors="replace"), dict(r.headers))
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.read().decode(errors="replace"), dict(e.headers))
        if path == "/v1/nodes:register" and a.status == 200 and isinstance(body, dict):
            cred = (a.json or {}).get("credential")
            if cred:
                self.node_creds[body.get("name")] = cred
        return a

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, spec):
        a = self.post("/v1/jobs", spec)
        assert a.status == 201, a
        return a.json

    def job(self, job_id):
        a = self.get("/v1/jobs/" + job_id)
        assert a.status == 200, a
        return a.json

    def wait_state(self, job_id, states, timeout=60):
        if isinstance(states, str):
            states = (states,)
        return wait_for("job %s in %s" % (job_id, states),
                        lambda: (lambda j: j if j["state"] in states else None)(self.job(job_id)),
                        timeout=timeout)
