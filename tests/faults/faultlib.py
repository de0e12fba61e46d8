"""Shared parts of the fault scenarios: a cluster whose nodes are separate hosts (network
namespaces, see netns.py), the job used by every scenario, and bounded waits on what ddpd,
the agents and the workers show.

FaultCluster is tests/integration/cluster.py's Cluster with ddpd listening on the bridge
address and each agent started inside its node's namespace. Every process it starts carries
the test's unique temp path in its command line (ddpd: --db under it; agents: --work-dir under
it; workers: the job runs a symlink to ddp-worker under it), so `pgrep -f <tmp>` finds exactly
this test's processes; stop() checks that none is left (and kills any it finds, failing).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from cluster import BIN, Cluster, isolation_args, port_range, wait_for, pid_alive  # noqa: E402,F401
from netns import Net  # noqa: E402

DATA = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def fashion_available():
    return os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def parse_time(s):
    """RFC 3339 UTC with milliseconds -> seconds since the epoch (float)."""
    import calendar
    m = re.match(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(?:\.(\d+))?Z$", s)
    if not m:
        raise ValueError("bad time %r" % s)
    t = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
    frac = m.group(7) or "0"
    return t + int(frac) / 10 ** len(frac)


class FaultCluster(Cluster):
    """ddpd on net.server_addr, agents in the nodes' namespaces."""

    def __init__(self, net, node_timeout=4, ddpd_args=()):
        super().__init__(node_timeout=node_timeout, ddpd_args=ddpd_args)
        self.net = net
        self.url = "http://%s:%d" % (net.server_addr, self.port)
        self.ddpd_args += ["--db", os.path.join(self.home, "ddp.db")]
        os.makedirs(os.path.join(self.tmp, "bin"), exist_ok=True)
        self.worker_bin = os.path.join(self.tmp, "bin", "ddp-worker")
        os.symlink(os.path.join(BIN, "ddp-worker"), self.worker_bin)
        self.failed_dump = False

    def start_ddpd(self, extra=()):
        argv = [os.path.join(BIN, "ddpd"), "--listen", "%s:%d" % (self.net.server_addr, self.port),
                "--node-timeout", str(self.node_timeout)] + self.ddpd_args + list(extra)
        self.ddpd = self._spawn(argv, "ddpd.log")
        wait_for("ddpd /healthz", lambda: self._healthy(), timeout=30)
        self.user_token = open(os.path.join(self.home, "user.token")).read().strip()
        self.agent_token = open(os.path.join(self.home, "agent.token")).read().strip()
        return self.ddpd

    def start_agent(self, name, slots=2, extra=(), env=None):
        work = self.agent_dir(name)
        os.makedirs(work, exist_ok=True)
        argv = [os.path.join(BIN, "ddp-agent"), "--server", self.agent_server(), "--name", name,
                "--address", self.net.addr[name], "--slots", str(slots),
                "--port-range", port_range(), "--work-dir", work,
                "--token-file", os.path.join(self.home, "agent.token")]
        argv += isolation_args(extra) + list(extra)
        p = self._spawn(self.net.run_argv(name, argv), "agent-%s.log" % name, env=env)
        self.agents[name] = p
        return p

    def agent_server(self):
        """The agents' --server: ddpd's URL (a list where there are replicas)."""
        return self.url

    def agent_dir(self, name):
        return os.path.join(self.tmp, "agent-" + name)

    # -- what runs ---------------------------------------------------------------------------
    def our_pids(self):
        r = subprocess.run(["pgrep", "-f", self.tmp], stdout=subprocess.PIPE, timeout=20)
        return [int(x) for x in r.stdout.split()]

    def workers(self, job_id=None):
        """Running ddp-worker processes of this test: dicts pid, node, rank, generation, job."""
        out = []
        agent_of = {p.pid: n for n, p in self.agents.items()}
        for pid in self.our_pids():
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv0 = f.read().split(b"\0")[0].decode(errors="replace")
                if argv0 != self.worker_bin:
                    continue
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                state, ppid = fields[0], int(fields[1])
            except (OSError, ValueError):
                continue
            if state == "Z":
                continue
            w = {"pid": pid, "node": agent_of.get(ppid), "state": state,
                 "rank": int(env.get(b"RANK", b"-1")),
                 "generation": int(env.get(b"DDP_GENERATION", b"0")),
                 "job": env.get(b"DDP_JOB_ID", b"").decode()}
            if job_id is None or w["job"] == job_id:
                out.append(w)
        return out

    def heartbeat_file(self, node, job_id, generation, rank):
        return os.path.join(self.agent_dir(node), "jobs", job_id, "gen-%d" % generation,
                            "rank-%d.heartbeat" % rank)

    def wait_training(self, job_id, generation, nodes_ranks, timeout=60):
        """Waits until the first training step of `generation` (a heartbeat file of one of
        its ranks exists: the runtime touches it after each step); returns the time seen."""
        def seen():
            for node, rank in nodes_ranks:
                if os.path.exists(self.heartbeat_file(node, job_id, generation, rank)):
                    return time.time()
            return None
        return wait_for("first step of %s generation %d" % (job_id, generation), seen,
                        timeout=timeout, interval=0.02)

    def events(self, job_id):
        a = self.get("/v1/jobs/%s/events" % job_id)
        assert a.status == 200, a
        return a.json["events"]

    def metrics(self, job_id):
        a = self.get("/v1/jobs/%s/metrics" % job_id)
        assert a.status == 200, a
        return [m["metric"] for m in a.json["metrics"]]

    def logs(self, job_id):
        a = self.get("/v1/jobs/%s/logs?limit=100000" % job_id)
        if a.status != 200:
            a = self.get("/v1/jobs/%s/logs" % job_id)
        assert a.status == 200, a
        return [l["text"] for l in a.json["lines"]]

    def wait_event(self, job_id, pred, what, timeout=60):
        """The first event for which pred(event) holds; bounded."""
        def find():
            for e in self.events(job_id):
                if pred(e):
                    return e
            return None
        return wait_for(what, find, timeout=timeout, interval=0.05)

    def wait_epoch(self, job_id, epoch, generation=None, timeout=120):
        """Waits until rank 0 reported `epoch` (in `generation` when given)."""
        def done():
            j = self.job(job_id)
            if j["state"] in ("FAILED", "CANCELLED", "SUCCEEDED"):
                raise AssertionError("job ended (%s: %s) before epoch %d" %
                                     (j["state"], j["reason"], epoch))
            for m in self.metrics(job_id):
                if m.get("epoch", 0) >= epoch and (generation is None or
                                                    m.get("generation") == generation):
                    return m
            return None
        return wait_for("epoch %d of %s" % (epoch, job_id), done, timeout=timeout, interval=0.1)

    def ddpctl(self, *args):
        argv = [os.path.join(BIN, "ddpctl"), "--server", self.url, "--token-file",
                os.path.join(self.home, "user.token")] + list(args)
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        return r.returncode, r.stdout.decode(errors="replace")

    def dump(self, job_id=None):
        """On failure: what ddpd and the agents said, the job and its events."""
        print("---- ddpd.log (tail)\n" + "\n".join(self.log("ddpd.log").splitlines()[-40:]))
        for n in self.agents:
            print("---- agent-%s.log (tail)\n" % n +
                  "\n".join(self.log("agent-%s.log" % n).splitlines()[-30:]))
        if job_id:
            try:
                print("---- job", json.dumps(self.job(job_id)))
                for e in self.events(job_id):
                    print("event", e["seq"], e["generation"], e["state"], e["reason"])
                for l in self.logs(job_id)[-20:]:
                    print("log", l)
            except Exception as e:  # noqa: BLE001 - the dump must not hide the real failure
                print("(cannot read the job: %s)" % e)

    def stop(self):
        """Stops everything (Cluster.stop), then checks no process of this test is left;
        returns the leftovers it had to kill (the caller fails the test on any)."""
        super().stop()
        left = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [p for p in self.our_pids() if pid_alive(p)]
            if not left:
                break
            time.sleep(0.1)
        for pid in left:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    print("LEFT BEHIND: pid %d %s" % (pid, f.read().replace(b"\0", b" ")
                                                      .decode(errors="replace")))
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.leftover = left
        return left


def worker_cmd(c, epochs, data=None, extra=()):
    """The job's argv: our worker symlink (so pgrep finds it) with a bounded rendezvous and
    collective timeout, so that a lost peer turns into exit 6 within seconds."""
    argv = [c.worker_bin, "--epochs", str(epochs), "--timeout", "20"]
    if data:
        argv += ["--data", data]
    return argv + list(extra)


class Report:
    """Checks and figures of one scenario; done() prints them and gives the exit status."""

    def __init__(self, name):
        self.name = name
        self.fails = []
        self.figures = {}

    def check(self, what, cond, detail=""):
        print("%s: %s" % ("ok  " if cond else "FAIL", what), flush=True)
        if not cond:
            self.fails.append(what)
            if detail:
                print("     " + str(detail)[:3000])
        return cond

    def figure(self, key, value):
        self.figures[key] = value
        print("figure %s = %s" % (key, value), flush=True)

    def done(self):
        fig = " ".join("%s=%s" % kv for kv in self.figures.items())
        if self.fails:
            print("RESULT %s FAILED (%d checks): %s | %s" % (self.name, len(self.fails),
                                                             "; ".join(self.fails), fig))
            return 1
        print("RESULT %s passed | %s" % (self.name, fig))
        return 0


SKIP_CODE = 77  # ctest's SKIP_RETURN_CODE in tests/faults.cmake


class Skip(Exception):
    """Raised by a scenario that cannot run here (said, exit SKIP_CODE)."""


def run_scenario(name, nodes, new_cluster, fn, start=None, dump_job=None):
    """Runs scenario fn(cluster, report) on hosts `nodes` (netns.Net), with the cluster
    new_cluster(net) makes and start(cluster) (when given) starts; then stops every process,
    deletes the namespaces and checks that nothing is left. On a failed check the cluster dumps
    what it knows of the job fn returned (else of dump_job). Returns the exit status: 0, 1 (a
    check failed) or SKIP_CODE."""
    rep = Report(name)
    t_start = time.monotonic()
    net = Net(nodes)
    print("== %s: %s" % (name, net.describe()), flush=True)
    c = None
    skipped = None
    try:
        c = new_cluster(net)
        if start is not None:
            start(c)
        jid = None
        try:
            jid = fn(c, rep)
        except Skip as e:
            skipped = str(e)
        except Exception:  # noqa: BLE001 - reported as a failed check with the trace
            rep.check("scenario ran to its end", False, traceback.format_exc())
        if rep.fails:
            c.dump(jid or dump_job)
    finally:
        if c is not None:
            left = c.stop()
            rep.check("no process of the test left (pgrep -f on its temp path)", not left, left)
        net.close()
        left = net.leftovers()
        rep.check("namespaces, veths and bridge deleted", not left, left)
    rep.figure("wall_s", "%.0f" % (time.monotonic() - t_start))
    rep.figure("net", net.mode)
    status = rep.done()
    if skipped and status == 0:
        print("SKIP %s: %s" % (name, skipped))
        return SKIP_CODE
    return status
