"""Retention of finished jobs on a real ddpd (a real SQLite file), over HTTP and with the real
ddpctl:

- DELETE /v1/jobs/{id}: by the owner and by an admin (200, the job as it was, then 404 on every
  call of the job and gone from the listing and from every table of the database), by another
  user (404, as for a job never submitted), by a viewer (403), of a live job (400
  FAILED_PRECONDITION naming its state);
- ids are never reused: deleting the newest job, then a restart of ddpd, then a submit;
- ddpd --job-ttl 2 deletes a finished job by itself, and leaves a live one;
- GET /v1/jobs/{id}/logs:download: gzip, its headers, and gunzipped exactly the lines of
  /logs (more lines than one page of ddpd's reader), read by a viewer, 404 for another user;
- ddpctl delete JOB... (several ids, exit 1 naming those that failed) and ddpctl logs JOB
  --download F.
"""
import gzip
import json
import os
import sqlite3
import subprocess
import urllib.error
import urllib.request

from api_sim import Api, SimNode, cluster, db_path, expect_error, run_tests, wait_for
from cli_util import CTL, ctl, ctl_env


def add_user(api, name, role):
    a = api.post("/v1/users", {"name": name, "role": role})
    assert a.status == 201, a
    return a.json["token"]


def submit_as(api, token, spec):
    a = api.post("/v1/jobs", spec, token=token)
    assert a.status == 201, a
    return a.json["id"]


def run_to_end(api, node, job_id, lines=(), code=0):
    """Runs job_id on the simulated node: ships lines (rank 0, in beats of 100), then every
    worker exits with code; returns when the job is final."""
    wait_for("job %s assigned" % job_id, lambda: node.beat() and node.assignment(job_id),
             timeout=30, interval=0.1)
    lines = list(lines)
    for i in range(0, len(lines), 100):
        node.pending_logs = [{"job_id": job_id, "generation": 1, "rank": 0, "seq": i + 1,
                              "lines": lines[i:i + 100]}]
        node.beat()
    node.exit_workers(job_id, code=code)
    node.beat()
    return api.wait_state(job_id, ("SUCCEEDED", "FAILED"), poke=node.beat)


def db_rows(c, job_num):
    """Rows of job j-<job_num> in each table of the database (read-only)."""
    con = sqlite3.connect("file:%s?mode=ro" % db_path(c), uri=True, timeout=10)
    try:
        out = {}
        for t, col in (("jobs", "id"), ("events", "job_id"), ("metrics", "job_id"),
                       ("logs", "job_id"), ("marks", "job_id")):
            out[t] = con.execute("SELECT COUNT(*) FROM %s WHERE %s = ?" % (t, col),
                                 (job_num,)).fetchone()[0]
        return out
    finally:
        con.close()


def download(api, job_id, token):
    """GET .../logs:download as bytes; returns (status, headers, body), the answer checked
    against the OpenAPI document."""
    c = api.c
    path = "/v1/jobs/%s/logs:download" % job_id
    req = urllib.request.Request(c.url + path, method="GET")
    tok = c.user_token if token == "user" else token
    req.add_header("Authorization", "Bearer " + tok)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, headers, body = r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        status, headers, body = e.code, dict(e.headers), e.read()
    text = body.decode(errors="replace") if status != 200 else ""
    try:
        js = json.loads(text) if text else None
    except ValueError:
        js = None
    api.chk.check("GET", path, status, headers, text, js)
    return status, {k.lower(): v for k, v in headers.items()}, body


def all_log_text(api, job_id, token="user"):
    """Every kept line of /logs (pages of 1000, bounded) as one string of text + newline."""
    out, after = [], 0
    for _ in range(1000):
        a = api.get("/v1/jobs/%s/logs?after=%d&limit=1000" % (job_id, after), token=token)
        assert a.status == 200, a
        if not a.json["lines"]:
            break
        out += [ln["text"] + "\n" for ln in a.json["lines"]]
        after = a.json["next"]
    return "".join(out)


def test_delete_by_role():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        alice = add_user(api, "alice", "user")
        bob = add_user(api, "bob", "user")
        vera = add_user(api, "vera", "viewer")
        n = SimNode(api, "na", slots=1)
        n.register()
        done = submit_as(api, alice, {"command": ["true"]})
        run_to_end(api, n, done, lines=["hello", "world"])
        live = submit_as(api, alice, {"command": ["true"], "nnodes": "5"})  # stays PENDING
        other = submit_as(api, alice, {"command": ["true"], "nnodes": "5"})
        num = int(done[2:])
        rows = db_rows(c, num)
        assert rows["jobs"] and rows["events"] and rows["logs"] == 2, rows

        a = api.request("DELETE", "/v1/jobs/" + done, token=bob)
        expect_error(a, 404, done, "another user")
        assert a.json["error"]["message"] == "job %s not found" % done, a
        a = api.request("DELETE", "/v1/jobs/" + done, token=vera)
        expect_error(a, 403, "alice", "a viewer")
        a = api.request("DELETE", "/v1/jobs/" + live, token=alice)
        assert a.status == 400 and a.json["error"]["status"] == "FAILED_PRECONDITION", a
        assert "is PENDING" in a.json["error"]["message"], a
        assert "cancel it first" in a.json["error"]["message"], a
        a = api.request("DELETE", "/v1/jobs/j-999", token=alice)
        expect_error(a, 404, "j-999", "unknown")

        a = api.request("DELETE", "/v1/jobs/" + done, token=alice)
        assert a.status == 200 and a.json["id"] == done and a.json["state"] == "SUCCEEDED", a
        for suffix in ("", "/events", "/metrics", "/logs"):
            expect_error(api.get("/v1/jobs/" + done + suffix, token=alice), 404, done, suffix)
        expect_error(api.post("/v1/jobs/%s:cancel" % done, token=alice), 404, done, "cancel")
        expect_error(api.request("DELETE", "/v1/jobs/" + done, token=alice), 404, done, "again")
        assert download(api, done, alice)[0] == 404
        ids = [j["id"] for j in api.get("/v1/jobs?all=true").json["jobs"]]
        assert done not in ids and live in ids, ids
        assert db_rows(c, num) == {"jobs": 0, "events": 0, "metrics": 0, "logs": 0,
                                   "marks": 0}, db_rows(c, num)

        # an admin deletes anybody's finished job
        assert api.post("/v1/jobs/%s:cancel" % other, token=alice).status == 200
        api.wait_state(other, "CANCELLED")
        a = api.request("DELETE", "/v1/jobs/" + other)
        assert a.status == 200 and a.json["state"] == "CANCELLED", a
        assert api.get("/v1/jobs/" + other).status == 404


def test_ids_not_reused_after_restart():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        first = api.submit({"command": ["true"], "nnodes": "5"})["id"]
        newest = api.submit({"command": ["true"], "nnodes": "5"})["id"]
        assert (first, newest) == ("j-1", "j-2"), (first, newest)
        assert api.post("/v1/jobs/%s:cancel" % newest).status == 200
        assert api.request("DELETE", "/v1/jobs/" + newest).status == 200
        c.kill_ddpd()
        c.start_ddpd()
        api = Api(c)
        assert api.get("/v1/jobs/" + first).status == 200
        assert api.get("/v1/jobs/" + newest).status == 404
        assert api.submit({"command": ["true"], "nnodes": "5"})["id"] == "j-3"
        # and a gap in the middle loads too
        assert api.post("/v1/jobs/%s:cancel" % first).status == 200
        assert api.request("DELETE", "/v1/jobs/" + first).status == 200
        c.kill_ddpd()
        c.start_ddpd()
        api = Api(c)
        assert [j["id"] for j in api.all_jobs()] == ["j-3"], api.all_jobs()
        assert api.submit({"command": ["true"], "nnodes": "5"})["id"] == "j-4"


def test_job_ttl_deletes_finished_jobs():
    with cluster(node_timeout=300, ddpd_args=["--job-ttl", "2"]) as c:
        api = Api(c)
        n = SimNode(api, "na", slots=1)
        n.register()
        done = api.submit({"command": ["true"]})["id"]
        run_to_end(api, n, done, lines=["bye"])
        live = api.submit({"command": ["true"], "nnodes": "5"})["id"]
        wait_for("%s deleted by --job-ttl" % done,
                 lambda: api.get("/v1/jobs/" + done).status == 404, timeout=20, interval=0.2)
        assert db_rows(c, int(done[2:]))["logs"] == 0
        wait_for("the sweep's log line", lambda: "--job-ttl: deleted 1 finished jobs" in
                 c.log("ddpd.log"), timeout=10)
        # a live job is never swept
        assert api.job(live)["state"] == "PENDING"


def test_logs_download_equals_logs():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        alice = add_user(api, "alice", "user")
        bob = add_user(api, "bob", "user")
        vera = add_user(api, "vera", "viewer")
        n = SimNode(api, "na", slots=1)
        n.register()
        job = submit_as(api, alice, {"command": ["true"]})
        # 700 lines: more than one page (256) of ddpd's reader, odd ones included
        lines = ["line %d %s" % (i, "x" * (i % 50)) for i in range(690)]
        lines += ["", " lead and trail ", "ünïcödé ✓", "tab\there", "a" * 4096, "q\"uote",
                  "back\\slash", "{\"json\": 1}", "%s %d", "last"]
        run_to_end(api, n, job, lines=lines)
        want = all_log_text(api, job, token=alice)
        assert want.count("\n") == 700, want.count("\n")
        status, headers, body = download(api, job, alice)
        assert status == 200, (status, body[:300])
        assert headers["content-type"] == "application/gzip", headers
        assert headers["content-disposition"] == 'attachment; filename="%s.log.gz"' % job, \
            headers
        assert body[:2] == b"\x1f\x8b", body[:10]
        got = gzip.decompress(body).decode()
        assert got == want, (len(got), len(want))
        assert len(body) < len(got.encode()), "not compressed"
        # read access as for /logs: a viewer reads it, another user does not see the job
        assert download(api, job, vera)[0] == 200
        status, _, body = download(api, job, bob)
        assert status == 404, (status, body)
        # an empty log is a valid gzip of nothing
        empty = submit_as(api, alice, {"command": ["true"], "nnodes": "5"})
        status, _, body = download(api, empty, alice)
        assert status == 200 and gzip.decompress(body) == b"", (status, body)
        # a query parameter it does not take
        a = api.get("/v1/jobs/%s/logs:download?tail=3" % job, token=alice)
        expect_error(a, 400, "tail", "unknown parameter")


def test_ctl_delete_and_download():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "na", slots=1)
        n.register()
        a = api.submit({"command": ["true"]})["id"]
        run_to_end(api, n, a, lines=["one", "two", "three"])
        b = api.submit({"command": ["true"], "max_restarts": 0})["id"]
        run_to_end(api, n, b, code=1)
        live = api.submit({"command": ["true"], "nnodes": "5"})["id"]

        out = os.path.join(c.tmp, "a.log.gz")
        r = ctl(c, "logs", a, "--download", out)
        assert r.rc == 0, r
        with gzip.open(out, "rt") as f:
            assert f.read() == "one\ntwo\nthree\n"
        assert not os.path.exists(out + ".part"), os.listdir(c.tmp)
        assert not [f for f in os.listdir(c.tmp) if ".tmp." in f], os.listdir(c.tmp)
        # a link planted where the old fixed temporary name was is neither followed nor
        # touched: the download goes into a new name of its own
        victim = os.path.join(c.tmp, "victim")
        with open(victim, "w") as f:
            f.write("keep me\n")
        os.symlink(victim, out + ".part")
        r = ctl(c, "logs", a, "--download", out)
        assert r.rc == 0, r
        with open(victim) as f:
            assert f.read() == "keep me\n"
        with gzip.open(out, "rt") as f:
            assert f.read() == "one\ntwo\nthree\n"
        # the mode a file any program makes: 0666 less the umask
        os.unlink(out)
        p = subprocess.run(["sh", "-c", 'umask 077 && exec "$0" "$@"', CTL, "logs", a,
                            "--download", out], capture_output=True, env=ctl_env(c), timeout=60)
        assert p.returncode == 0, p
        assert os.stat(out).st_mode & 0o777 == 0o600, oct(os.stat(out).st_mode)
        r = ctl(c, "logs", a, "--download", out, "-f")
        assert r.rc == 2 and "usage: ddpctl logs" in r.err, r
        r = ctl(c, "logs", "j-999", "--download", os.path.join(c.tmp, "none.gz"))
        assert r.rc == 1 and "job j-999 not found" in r.err, r
        assert not os.path.exists(os.path.join(c.tmp, "none.gz"))
        assert not os.path.exists(os.path.join(c.tmp, "none.gz.part"))

        r = ctl(c, "delete", a, live, "j-999", b)
        assert r.rc == 1, r
        assert "deleted job %s (SUCCEEDED)" % a in r.out, r
        assert "deleted job %s (FAILED)" % b in r.out, r
        assert "is PENDING" in r.err and "job j-999 not found" in r.err, r
        assert "2 of 4 jobs not deleted: %s, j-999" % live in r.err, r
        assert api.get("/v1/jobs/" + a).status == 404
        assert api.get("/v1/jobs/" + b).status == 404
        assert api.get("/v1/jobs/" + live).status == 200
        r = ctl(c, "delete")
        assert r.rc == 2 and "missing the job id" in r.err, r
        # an id that is not UTF-8 still counts as a failure: exit 1, not 0
        for verb in ("delete", "cancel", "status"):
            p = subprocess.run([CTL, verb, b"j-\xff"], capture_output=True, env=ctl_env(c),
                               timeout=60)
            assert p.returncode == 1 and b"not found" in p.stderr, (verb, p)
            p = subprocess.run([CTL, "-o", "json", verb, b"j-\xff", "j-998"],
                               capture_output=True, env=ctl_env(c), timeout=60)
            failed = json.loads(p.stdout)["failed"]
            assert p.returncode == 1 and [f["id"] for f in failed] == ["j-?", "j-998"], (verb, p)
        # a user deletes only what it may
        tok = add_user(api, "bob", "user")
        r = ctl(c, "delete", live, env=ctl_env(c, home=False, extra={"DDP_TOKEN": tok}))
        assert r.rc == 1 and "job %s not found" % live in r.err, r
        assert api.post("/v1/jobs/%s:cancel" % live).status == 200
        r = ctl(c, "-o", "json", "delete", live)
        assert r.rc == 0 and '"deleted"' in r.out and live in r.out, r


if __name__ == "__main__":
    run_tests(globals())
