"""Shared pieces of the API integration tests (tests/integration/test_api_*.py).

- Api: sends requests to a Cluster's ddpd and checks every answer against
  schema/openapi.json (openapi_check.Checker) before handing it back.
- SimNode: a simulated agent driven by the test itself (register, heartbeat with the whole
  worker state, reconcile against the desired set as docs/api.md says: start the workers of a
  new assignment, forget those whose (job, generation) left the set). The test decides when a
  worker exits and with which code.
- expect_error: checks status, gRPC status, code and that the message names the field.
- db_dump: the whole SQLite content (read-only), to show a refused request changed nothing.
- run_tests: runs the test functions of a module in order, reports each, exits non-zero if
  any failed.
"""
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, wait_for, port_range  # noqa: E402,F401
import openapi_check  # noqa: E402

STATUS_OF = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
             404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 409: "ALREADY_EXISTS",
             413: "RESOURCE_EXHAUSTED", 429: "RESOURCE_EXHAUSTED"}

_CHECKER = None


def checker():
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = openapi_check.Checker()
    return _CHECKER


class cluster:
    """`with cluster(...) as c:` a Cluster whose processes are stopped even when ddpd fails to
    come up (Cluster.__enter__ raising would leave them); fails clearly if ddpd is not built."""

    def __init__(self, **kw):
        self.kw = kw
        self.c = None

    def __enter__(self):
        from cluster import BIN
        ddpd = os.path.join(BIN, "ddpd")
        if not os.access(ddpd, os.X_OK):
            raise AssertionError("ddpd not built: %s missing (set DDP_BIN)" % ddpd)
        self.c = Cluster(**self.kw)
        try:
            self.c.start_ddpd()
        except BaseException:
            print(self.c.log("ddpd.log")[-3000:])
            self.c.stop()
            raise
        return self.c

    def __exit__(self, *exc):
        """Stops ddpd with SIGTERM first: it must exit 0 within 10 s, and its log must hold no
        sanitizer report (ASan, LeakSanitizer, UBSan) from any of its runs."""
        c = self.c
        problem = None
        try:
            if c.ddpd is not None and c.ddpd.poll() is None:
                c.ddpd.send_signal(signal.SIGTERM)
                try:
                    c.ddpd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    problem = "ddpd did not stop within 10 s of SIGTERM"
            log = c.log("ddpd.log")
            if problem is None and c.ddpd is not None and c.ddpd.returncode != 0:
                problem = "ddpd exited with %s after SIGTERM" % c.ddpd.returncode
            m = re.search(r"(ERROR: (Address|Leak|Thread)Sanitizer|runtime error:).*", log)
            if m:
                problem = "sanitizer report in ddpd.log: " + log[m.start():m.start() + 3000]
            if exc[0] is not None or problem:
                print("ddpd log tail:\n" + log[-3000:])
        finally:
            c.stop()
        if problem and exc[0] is None:
            raise AssertionError(problem)


class Api:
    """Cluster.request with every answer checked against the OpenAPI document."""

    def __init__(self, cluster):
        self.c = cluster
        self.chk = checker()

    def request(self, method, path, body=None, check=True, **kw):
        a = self.c.request(method, path, body=body, **kw)
        if check:
            self.chk.check(method, path, a.status, a.headers, a.text, a.json)
        return a

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def submit(self, spec):
        a = self.post("/v1/jobs", spec)
        assert a.status == 201, "submit %s: %r" % (spec, a)
        return a.json

    def job(self, job_id):
        a = self.get("/v1/jobs/" + job_id)
        assert a.status == 200, a
        return a.json

    def all_jobs(self, state=None, page_size=1000):
        """Every job over all pages (bounded), newest first."""
        jobs, token = [], ""
        for _ in range(1000):
            q = "/v1/jobs?page_size=%d" % page_size
            if state:
                q += "&state=" + state
            if token:
                q += "&page_token=" + token
            a = self.get(q)
            assert a.status == 200, a
            jobs += a.json["jobs"]
            token = a.json["next_page_token"]
            if not token:
                return jobs
        raise AssertionError("pagination did not end")

    def nodes(self):
        a = self.get("/v1/nodes")
        assert a.status == 200, a
        return {n["name"]: n for n in a.json["nodes"]}

    def events(self, job_id, after=0):
        a = self.get("/v1/jobs/%s/events?after=%d" % (job_id, after))
        assert a.status == 200, a
        return a.json["events"]

    def wait_state(self, job_id, states, timeout=30, poke=None):
        """Polls the job until its state is one of states; poke() (e.g. nodes beating) is
        called on each round."""
        if isinstance(states, str):
            states = (states,)

        def probe():
            if poke:
                poke()
            j = self.job(job_id)
            return j if j["state"] in states else None
        return wait_for("job %s in %s" % (job_id, states), probe, timeout=timeout,
                        interval=0.1)


class SimNode:
    """A simulated ddp-agent. workers: {(job_id, generation, rank): dict as sent}."""

    def __init__(self, api, name, slots=2, address="127.0.0.1", ports=None):
        self.api = api
        self.name = name
        self.slots = slots
        self.address = address
        self.ports = ports or port_range()
        self.incarnation = secrets.token_hex(8)
        self.version = 0
        self.assignments = {}  # (job_id, generation) -> assignment
        self.workers = {}
        self.pending_logs = []
        self.pending_metrics = []
        self.progress = []  # sent with every beat while set
        self.next_pid = 10000

    def register(self, expect=200):
        """Registers with the bootstrap token, showing the credential of the last
        registration (as the agent does), so that a restart takes the live name over."""
        body = {"name": self.name, "address": self.address, "slots": self.slots,
                "port_range": self.ports, "incarnation": self.incarnation}
        cred = self.api.c.node_creds.get(self.name)
        if cred:
            body["credential"] = cred
        a = self.api.post("/v1/nodes:register", body, token="agent")
        assert a.status == expect, "register %s: %r" % (self.name, a)
        return a

    def beat_body(self, version=None, wait_ms=0):
        body = {"incarnation": self.incarnation,
                "version": self.version if version is None else version,
                "wait_ms": wait_ms, "workers": list(self.workers.values())}
        if self.pending_logs:
            body["logs"] = self.pending_logs
        if self.pending_metrics:
            body["metrics"] = self.pending_metrics
        if self.progress:
            body["progress"] = self.progress
        return body

    def beat(self, version=None, wait_ms=0, expect=200, timeout=30):
        """One heartbeat; on 200 reconciles like the agent and returns the Answer."""
        a = self.api.post("/v1/nodes/%s:heartbeat" % self.name,
                          self.beat_body(version, wait_ms), token="node", timeout=timeout)
        assert a.status == expect, "heartbeat %s: %r" % (self.name, a)
        if a.status == 200:
            self.pending_logs, self.pending_metrics = [], []
            self.reconcile(a.json)
        return a

    def reconcile(self, answer):
        self.version = answer["version"]
        desired = {(x["job_id"], x["generation"]): x for x in answer["assignments"]}
        for key in list(self.workers):
            if key[:2] not in desired:
                del self.workers[key]
        for key, x in desired.items():
            for lr in range(x["nproc_per_node"]):
                rank = x["group_rank"] * x["nproc_per_node"] + lr
                if (key[0], key[1], rank) not in self.workers:
                    self.next_pid += 1
                    self.workers[(key[0], key[1], rank)] = {
                        "job_id": key[0], "generation": key[1], "rank": rank,
                        "local_rank": lr, "pid": self.next_pid, "state": "running"}
        self.assignments = desired

    def assignment(self, job_id):
        """This node's assignment of job_id (newest generation), or None."""
        xs = [x for (j, _), x in self.assignments.items() if j == job_id]
        return max(xs, key=lambda x: x["generation"]) if xs else None

    def exit_workers(self, job_id, code=0, ranks=None, signal=0):
        """Marks this node's workers of job_id (all, or those in ranks) as exited."""
        n = 0
        for (j, _, rank), w in self.workers.items():
            if j == job_id and (ranks is None or rank in ranks):
                w.update(state="exited", exit_code=code, signal=signal)
                n += 1
        return n


def beat_all(nodes):
    for n in nodes:
        n.beat()


def wait_assigned(job_id, nodes, generation=None, timeout=30):
    """Beats the nodes until every one has an assignment of job_id (of generation, if given);
    returns the assignments in node order."""
    def probe():
        beat_all(nodes)
        xs = [n.assignment(job_id) for n in nodes]
        if all(x is not None and (generation is None or x["generation"] == generation)
               for x in xs):
            return xs
        return None
    return wait_for("job %s assigned on %s" % (job_id, [n.name for n in nodes]), probe,
                    timeout=timeout, interval=0.1)


def expect_error(answer, status, field=None, what=""):
    """Checks an error answer: HTTP status, the body's code and gRPC status, and (if given)
    that the message names field."""
    ctx = "%s: %r" % (what, answer)
    assert answer.status == status, "expected %d, got %s" % (status, ctx)
    assert answer.json and "error" in answer.json, "no error body in " + ctx
    e = answer.json["error"]
    assert e.get("code") == status, "error.code %r != %d in %s" % (e.get("code"), status, ctx)
    assert e.get("status") == STATUS_OF[status], "error.status %r != %s in %s" % (
        e.get("status"), STATUS_OF[status], ctx)
    if field:
        assert field in e.get("message", ""), "message does not name %r in %s" % (field, ctx)


def db_path(cluster):
    return os.path.join(cluster.home, "ddp.db")


def db_dump(cluster, skip_tables=()):
    """Every row of every table of ddpd's database as text lines (read-only connection)."""
    con = sqlite3.connect("file:%s?mode=ro" % db_path(cluster), uri=True, timeout=10)
    try:
        lines = []
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for t in tables:
            if t in skip_tables:
                continue
            for row in con.execute('SELECT * FROM "%s"' % t.replace('"', '""')):
                lines.append("%s %r" % (t, row))
        return sorted(lines)
    finally:
        con.close()


def run_tests(module_globals, argv=None):
    """Runs every test_* function of the calling module (in source order, or those named on
    the command line); prints one line per test; exits 1 if any failed."""
    argv = sys.argv[1:] if argv is None else argv
    tests = [(n, f) for n, f in module_globals.items() if n.startswith("test_") and callable(f)]
    if argv:
        tests = [(n, f) for n, f in tests if n in argv]
    failed = []
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
            print("PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
        except Exception:  # a failed test is reported and the next one runs
            failed.append(name)
            print("FAIL %s (%.1fs)\n%s" % (name, time.monotonic() - t0,
                                           traceback.format_exc()), flush=True)
    print("%d passed, %d failed%s" % (len(tests) - len(failed), len(failed),
                                     (": " + ", ".join(failed)) if failed else ""))
    sys.exit(1 if failed or not tests else 0)
