"""Every bad input of issue 2 against a real ddpd: the HTTP status, the gRPC status and code
of the error body, a message naming the field, and a database left exactly as it was (every
row of every table compared, and the job count)."""
import json
import socket

import api_sim
from cluster import Answer
from api_sim import Api, SimNode, cluster, db_dump, expect_error

GOOD = {"command": ["true"], "nnodes": "2"}

# (what, body or raw bytes, field the message must name or None)
BAD_SPECS = [
    ("not JSON", b'{"command": [', None),
    ("not JSON at all", b"hello", None),
    ("wrong shape: array", [1, 2], None),
    ("wrong shape: string", "job", None),
    ("unknown field", dict(GOOD, colour="red"), "colour"),
    ("missing command", {"name": "x"}, "command"),
    ("wrong type nproc_per_node", dict(GOOD, nproc_per_node="2"), "nproc_per_node"),
    ("wrong type name", dict(GOOD, name=5), "name"),
    ("wrong type max_restarts float", dict(GOOD, max_restarts=1.5), "max_restarts"),
    ("wrong type env", dict(GOOD, env=["A=1"]), "env"),
    ("empty command", dict(GOOD, command=[]), "command"),
    ("command a string", dict(GOOD, command="echo hi"), "command"),
    ("command item not a string", dict(GOOD, command=["echo", 1]), "command"),
    ("command item empty", dict(GOOD, command=[""]), "command"),
    ("nnodes 0", dict(GOOD, nnodes="0"), "nnodes"),
    ("nnodes 3:2", dict(GOOD, nnodes="3:2"), "nnodes"),
    ("nnodes a:b", dict(GOOD, nnodes="a:b"), "nnodes"),
    ("nnodes integer 0", dict(GOOD, nnodes=0), "nnodes"),
    ("nnodes 1025", dict(GOOD, nnodes="1:1025"), "nnodes"),
    ("nproc_per_node 0", dict(GOOD, nproc_per_node=0), "nproc_per_node"),
    ("nproc_per_node 1025", dict(GOOD, nproc_per_node=1025), "nproc_per_node"),
    ("max_restarts -1", dict(GOOD, max_restarts=-1), "max_restarts"),
    ("max_runtime_s -1", dict(GOOD, max_runtime_s=-1), "max_runtime_s"),
    ("env value not a string", dict(GOOD, env={"A": 1}), "env"),
    ("env name with =", dict(GOOD, env={"A=B": "x"}), "env"),
    ("name with space", dict(GOOD, name="bad name"), "name"),
    ("name too long", dict(GOOD, name="n" * 64), "name"),
    ("workdir relative", dict(GOOD, workdir="rel/dir"), "workdir"),
]

BAD_QUERIES = [
    ("/v1/jobs?page_size=0", "page_size"),
    ("/v1/jobs?page_size=1001", "page_size"),
    ("/v1/jobs?page_size=abc", "page_size"),
    ("/v1/jobs?state=BOGUS", "state"),
    ("/v1/jobs/j-1/events?after=abc", "after"),
    ("/v1/jobs/j-1/logs?rank=x", "rank"),
]

FAILS = []


class Ctx:
    pass


def check_unchanged(ctx, what):
    dump = db_dump(ctx.c)
    assert dump == ctx.dump, "%s changed the database:\n-%s\n+%s" % (
        what, sorted(set(ctx.dump) - set(dump))[:5], sorted(set(dump) - set(ctx.dump))[:5])
    n = len(ctx.api.all_jobs())
    assert n == ctx.njobs, "%s: job count %d -> %d" % (what, ctx.njobs, n)


def each(ctx, cases, fn):
    """Runs fn(case) for every case, collecting failures so that one run lists them all."""
    bad = []
    for case in cases:
        try:
            fn(case)
        except AssertionError as e:
            bad.append(str(e))
    if bad:
        raise AssertionError("%d of %d cases failed:\n  " % (len(bad), len(cases)) +
                             "\n  ".join(bad))


def send_raw(c, method, path, headers, body, timeout=30):
    """Sends one request over a plain socket, writing the body in chunks and stopping quietly
    if the server stops reading; returns (status, headers dict, body text)."""
    s = socket.create_connection(("127.0.0.1", c.port), timeout=timeout)
    try:
        head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" % (method, path)
        head += "".join("%s: %s\r\n" % kv for kv in headers.items())
        head += "Content-Length: %d\r\n\r\n" % len(body)
        s.sendall(head.encode())
        try:
            for i in range(0, len(body), 65536):
                s.sendall(body[i:i + 65536])
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while len(data) < 1 << 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
    finally:
        s.close()
    if not data:
        raise AssertionError("%s %s: connection closed without an answer" % (method, path))
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip()] = v.strip()
    return status, hdrs, rest.decode(errors="replace")


def test_errors_all():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        ctx = Ctx()
        ctx.c, ctx.api = c, api
        job = api.submit(GOOD)  # needs 2 nodes: stays PENDING with the one node below
        node = SimNode(api, "err-node", slots=1)
        node.register()
        node.beat()
        ctx.njobs = len(api.all_jobs())
        ctx.dump = db_dump(c)
        assert ctx.dump, "the database looks empty"
        results = {}

        def bad_spec(case):
            what, body, field = case
            if isinstance(body, bytes):
                a = api.request("POST", "/v1/jobs", raw=body)
            else:
                a = api.post("/v1/jobs", body)
            expect_error(a, 400, field, "submit " + what)
            check_unchanged(ctx, "submit " + what)

        def bad_query(case):
            path, field = case
            expect_error(api.get(path), 400, field, "GET " + path)
            check_unchanged(ctx, "GET " + path)

        def run(name, cases, fn):
            try:
                each(ctx, cases, fn)
                results[name] = None
            except AssertionError as e:
                results[name] = str(e)

        run("specs", BAD_SPECS, bad_spec)
        run("queries", BAD_QUERIES, bad_query)

        def too_big(case):
            size = case
            body = json.dumps({"command": ["x" * 100] * (size // 104)}).encode()
            status, hdrs, text = send_raw(c, "POST", "/v1/jobs", {
                "Authorization": "Bearer " + c.user_token,
                "Content-Type": "application/json"}, body)
            a = Answer(status, text, hdrs)
            api.chk.check("POST", "/v1/jobs", a.status, a.headers, a.text, a.json)
            expect_error(a, 413, None, "POST /v1/jobs of %d bytes" % len(body))
            check_unchanged(ctx, "2 MiB body")
        run("413", [2 << 20], too_big)

        def not_found(case):
            method, path, token, field = case
            a = api.request(method, path, token=token)
            expect_error(a, 404, field, "%s %s" % (method, path))
            check_unchanged(ctx, "%s %s" % (method, path))
        run("404", [
            ("GET", "/v1/jobs/j-999", "user", "j-999"),
            ("GET", "/v1/jobs/nope", "user", None),
            ("POST", "/v1/jobs/j-999:cancel", "user", "j-999"),
            ("GET", "/v1/jobs/j-999/events", "user", "j-999"),
            ("GET", "/v1/jobs/j-999/metrics", "user", "j-999"),
            ("GET", "/v1/jobs/j-999/logs", "user", "j-999"),
            ("GET", "/v1/nope", "user", None),
            ("GET", "/v2/jobs", "user", None),
            ("POST", "/v1/jobs/%s:explode" % job["id"], "user", None),
            ("GET", "/v1/jobs/%s/secrets" % job["id"], "user", None),
        ], not_found)

        def wrong_method(case):
            method, path, token, allow = case
            a = api.request(method, path, token=token)
            expect_error(a, 405, None, "%s %s" % (method, path))
            got = {m.strip().upper() for m in
                   next((v for k, v in a.headers.items() if k.lower() == "allow"), "")
                   .split(",") if m.strip()}
            assert got == set(allow), "%s %s: Allow %s, expected %s" % (method, path, got,
                                                                          allow)
            check_unchanged(ctx, "%s %s" % (method, path))
        run("405", [
            ("DELETE", "/v1/jobs", "user", ("GET", "POST")),
            ("PUT", "/v1/jobs/" + job["id"], "user", ("GET", "PATCH", "DELETE")),
            ("GET", "/v1/jobs/%s:cancel" % job["id"], "user", ("POST",)),
            ("POST", "/v1/jobs/%s/events" % job["id"], "user", ("GET",)),
            ("POST", "/v1/nodes", "user", ("GET",)),
            ("GET", "/v1/nodes:register", "agent", ("POST",)),
            ("GET", "/v1/nodes/err-node:heartbeat", "agent", ("POST",)),
            ("POST", "/healthz", None, ("GET",)),
        ], wrong_method)

        def bad_agent(case):
            what, path, body, status, field = case
            a = api.post(path, body, token="node" if ":heartbeat" in path else "agent")
            if status == 409:
                assert a.status == 409 and a.json["error"]["status"] == "ABORTED", \
                    "%s: expected 409 ABORTED, got %r" % (what, a)
            else:
                expect_error(a, status, field, what)
            check_unchanged(ctx, what)
        def not_json_beat(case):
            what, path, _, status, _ = case
            a = api.request("POST", path, raw=b"{nope", token="node")
            expect_error(a, status, None, what)
            check_unchanged(ctx, what)

        reg = {"name": "n2", "address": "127.0.0.1", "slots": 2, "port_range": "30000-30010",
               "incarnation": "abc"}
        beat = {"incarnation": node.incarnation, "version": 0, "wait_ms": 0, "workers": []}
        run("agent", [
            ("heartbeat of an unregistered node (no credential is its)",
             "/v1/nodes/ghost:heartbeat", {"incarnation": "x", "version": 0, "workers": []}, 401,
             None),
            ("heartbeat with another incarnation", "/v1/nodes/err-node:heartbeat",
             dict(beat, incarnation="other"), 409, None),
            ("heartbeat not JSON", "/v1/nodes/err-node:heartbeat", None, 400, None),
            ("heartbeat workers not an array", "/v1/nodes/err-node:heartbeat",
             dict(beat, workers="x"), 400, "workers"),
            ("heartbeat wait_ms a string", "/v1/nodes/err-node:heartbeat",
             dict(beat, wait_ms="a"), 400, "wait_ms"),
            ("heartbeat unknown field", "/v1/nodes/err-node:heartbeat",
             dict(beat, colour=1), 400, "colour"),
            ("heartbeat worker state bogus", "/v1/nodes/err-node:heartbeat",
             dict(beat, workers=[{"job_id": job["id"], "generation": 1, "rank": 0,
                                  "local_rank": 0, "pid": 1, "state": "dancing"}]), 400,
             "state"),
            ("register slots 0", "/v1/nodes:register", dict(reg, slots=0), 400, "slots"),
            ("register bad name", "/v1/nodes:register", dict(reg, name="a b"), 400, "name"),
            ("register no incarnation", "/v1/nodes:register",
             {k: v for k, v in reg.items() if k != "incarnation"}, 400, "incarnation"),
            ("register unknown field", "/v1/nodes:register", dict(reg, colour=1), 400,
             "colour"),
            ("register bad port_range", "/v1/nodes:register", dict(reg, port_range="x"), 400,
             "port_range"),
            ("register port_range backwards", "/v1/nodes:register",
             dict(reg, port_range="30010-30000"), 400, "port_range"),
        ], lambda case: bad_agent(case) if case[2] is not None else not_json_beat(case))

        failed = {k: v for k, v in results.items() if v}
        assert not failed, "\n".join("[%s] %s" % kv for kv in failed.items())
        assert api.chk.checked > 60, api.chk.checked


def test_errors_size_limit_boundary():
    """A valid body near 1 MiB is accepted; 1 MiB + 1 byte is 413 and stores nothing."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        big = {"command": ["a" * 4000] * 240, "nnodes": "2"}  # about 965 KB
        n = len(json.dumps(big).encode())
        assert 900000 < n < 1 << 20, n
        a = api.post("/v1/jobs", big)
        assert a.status == 201 and a.json["spec"]["command"] == big["command"], \
            "valid body of %d bytes: %r" % (n, a)
        before = db_dump(c)
        body = b'{"command": ["' + b"b" * ((1 << 20) + 1 - 17) + b'"]}'
        assert len(body) == (1 << 20) + 1, len(body)
        status, hdrs, text = send_raw(c, "POST", "/v1/jobs", {
            "Authorization": "Bearer " + c.user_token, "Content-Type": "application/json"},
            body)
        a = Answer(status, text, hdrs)
        api.chk.check("POST", "/v1/jobs", a.status, a.headers, a.text, a.json)
        expect_error(a, 413, None, "body of 1 MiB + 1 byte")
        assert db_dump(c) == before, "the refused body changed the database"


def test_errors_query_and_nul():
    """Query parameters a call does not take, one given twice, and %00 in the request line are
    400 naming them, through a real ddpd (libmicrohttpd's own parsing); /metrics has no
    repeated series and labels each with the request's method."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        job = api.submit(GOOD)
        auth = {"Authorization": "Bearer " + c.user_token}
        cases = [
            ("GET", "/v1/jobs/%s%%00x" % job["id"], "encoded NUL"),
            ("GET", "/v1/jobs?state=%00", "encoded NUL"),
            ("GET", "/v1/jobs?state=PENDING&state=RUNNING", "'state' given more than once"),
            ("GET", "/v1/jobs?colour=red", "unknown query parameter 'colour'"),
            ("GET", "/v1/jobs/%s?x=1" % job["id"], "unknown query parameter 'x'"),
            ("GET", "/v1/nodes?all=1", "unknown query parameter 'all'"),
            ("GET", "/healthz?probe=1", "unknown query parameter 'probe'"),
            ("POST", "/v1/jobs/%s:cancel?force=1" % job["id"], "unknown query parameter 'force'"),
            ("GET", "/v1/jobs?" + "&".join("p%d=1" % i for i in range(17)),
             "more than 16 query parameters"),
            # a name cut inside a UTF-8 character (63 bytes then an e-acute) is still named,
            # the broken byte as \xNN, not lost to a bare "invalid argument"
            ("GET", "/v1/jobs?" + "a" * 63 + "%C3%A9=1", "unknown query parameter '" +
             "a" * 63 + "\\xc3'"),
            ("GET", "/v1/jobs?st%C3%A9=1", "unknown query parameter 'st\u00e9'"),
        ]
        before = db_dump(c)
        for method, path, part in cases:
            status, hdrs, text = send_raw(c, method, path, auth, b"")
            a = Answer(status, text, hdrs)
            expect_error(a, 400, part, "%s %s" % (method, path))
        assert api.get("/v1/jobs/" + job["id"]).json["state"] == "PENDING", \
            "a refused cancel acted"
        assert db_dump(c) == before, "a refused request changed the database"
        # what the real clients send still works
        for path in ("/v1/jobs?state=PENDING&page_size=5", "/v1/jobs/%s/logs?rank=0&tail=5" %
                     job["id"], "/v1/jobs/%s/events?after=0" % job["id"]):
            a = api.get(path)
            assert a.status == 200, (path, a)
        status, _, text = send_raw(c, "GET", "/metrics", {}, b"")
        assert status == 200, status
        series = [ln.rsplit(" ", 1)[0] for ln in text.splitlines() if ln and ln[0] != "#"]
        dups = sorted({s for s in series if series.count(s) > 1})
        assert not dups, "repeated series in /metrics: %s" % dups[:5]
        req = [s for s in series if s.startswith("ddp_http_requests_total{")]
        assert req and all('method="' in s for s in req), req[:5]
        assert any('route="/v1/jobs",method="POST",code="201"' in s for s in req), req
        assert any('route="/v1/jobs",method="GET",code="400"' in s for s in req), req


if __name__ == "__main__":
    api_sim.run_tests(globals())
