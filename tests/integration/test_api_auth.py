"""Auth of a real ddpd: token files created with mode 0600 next to the database, no or a wrong
token 401 UNAUTHENTICATED, the agent token on user calls and the user token on agent calls 403
PERMISSION_DENIED, /healthz and /metrics open; explicit --token-file / --agent-token-file are
used as given. No refused call changes the database."""
import os
import shutil
import ssl
import stat
import subprocess
import tempfile
import urllib.error
import urllib.request

import api_sim
from api_sim import Api, Cluster, cluster, db_dump, expect_error, wait_for
from cluster import BIN

USER_CALLS = [("POST", "/v1/jobs", {"command": ["true"]}), ("GET", "/v1/jobs", None),
              ("GET", "/v1/jobs/j-1", None), ("POST", "/v1/jobs/j-1:cancel", None),
              ("GET", "/v1/jobs/j-1/events", None), ("GET", "/v1/jobs/j-1/metrics", None),
              ("GET", "/v1/jobs/j-1/logs", None), ("GET", "/v1/nodes", None),
              ("GET", "/v1/openapi.json", None)]
AGENT_CALLS = [("POST", "/v1/nodes:register", {"name": "a", "address": "127.0.0.1", "slots": 1,
                                               "incarnation": "x"}),
               ("POST", "/v1/nodes/a:heartbeat", {"incarnation": "x", "version": 0})]


def test_auth_tokens_and_roles():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        for f in ("user.token", "agent.token"):
            st = os.stat(os.path.join(c.home, f))
            assert stat.S_IMODE(st.st_mode) == 0o600, "%s has mode %o" % (
                f, stat.S_IMODE(st.st_mode))
            assert st.st_size >= 16, "%s is short (%d bytes)" % (f, st.st_size)
        assert c.user_token != c.agent_token
        job = api.submit({"command": ["true"], "nnodes": "5"})
        assert job["id"] == "j-1", job
        before = db_dump(c)
        bad = []
        for calls, right, other in ((USER_CALLS, "user", "agent"),
                                    (AGENT_CALLS, "agent", "user")):
            for method, path, body in calls:
                for token, status in ((None, 401), ("wrong-" + c.user_token[:8], 401),
                                      (c.user_token + "x", 401), ("", 401),
                                      (other, 403)):
                    try:
                        a = api.request(method, path, body=body, token=token)
                        expect_error(a, status, None, "%s %s with token %r" % (
                            method, path, token if token in (None, "user", "agent")
                            else "bad"))
                    except AssertionError as e:
                        bad.append(str(e))
        # A header that is not Bearer is no token.
        a = api.request("GET", "/v1/jobs", token=None,
                        headers={"Authorization": "Basic " + c.user_token})
        try:
            expect_error(a, 401, None, "Basic auth header")
        except AssertionError as e:
            bad.append(str(e))
        assert not bad, "\n".join(bad)
        assert db_dump(c) == before, "a refused call changed the database"
        for path in ("/healthz", "/metrics"):
            a = api.get(path, token=None)
            assert a.status == 200, (path, a)


def test_auth_explicit_token_files():
    d = tempfile.mkdtemp(prefix="ddp-tok-")
    uf, af = os.path.join(d, "u.tok"), os.path.join(d, "a.tok")
    with open(uf, "w") as f:
        f.write("user-secret-0123456789abcdef\n")
    with open(af, "w") as f:
        f.write("agent-secret-0123456789abcdef\n")
    os.chmod(uf, 0o600)
    os.chmod(af, 0o600)
    c = Cluster(node_timeout=300)
    try:
        # Cluster.start_ddpd reads the tokens from $DDP_HOME; start ddpd by hand instead.
        c.ddpd = c._spawn([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % c.port,
                           "--token-file", uf, "--agent-token-file", af], "ddpd.log")
        wait_for("ddpd /healthz", c._healthy, timeout=20)
        c.user_token = "user-secret-0123456789abcdef"
        c.agent_token = "agent-secret-0123456789abcdef"
        api = Api(c)
        assert api.get("/v1/jobs").status == 200
        expect_error(api.get("/v1/jobs", token="agent"), 403, None,
                     "agent token of --agent-token-file on a user call")
        expect_error(api.get("/v1/jobs", token="wrong"), 401, None, "wrong token")
        a = api.post("/v1/nodes:register", {"name": "a", "address": "127.0.0.1",
                                            "slots": 1, "incarnation": "x"}, token="agent")
        assert a.status == 200, a
    finally:
        c.stop()
        for f in (uf, af):
            os.unlink(f)
        os.rmdir(d)


def test_auth_tokens_next_to_db_and_help():
    """--db elsewhere: the tokens are created next to the database. --help names every flag
    of the issue."""
    out = subprocess.run([os.path.join(BIN, "ddpd"), "--help"], capture_output=True,
                         timeout=30)
    text = (out.stdout + out.stderr).decode()
    assert out.returncode == 0, text
    for flag in ("--listen", "--db", "--token-file", "--agent-token-file", "--node-timeout",
                 "--tls-cert", "--tls-key", "--help"):
        assert flag in text, "--help does not document " + flag
    c = Cluster(node_timeout=300)
    d = tempfile.mkdtemp(prefix="ddp-db-", dir=c.tmp)
    try:
        c.ddpd = c._spawn([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % c.port,
                           "--db", os.path.join(d, "x.db")], "ddpd.log")
        wait_for("ddpd /healthz", c._healthy, timeout=20)
        for f in ("user.token", "agent.token"):
            p = os.path.join(d, f)
            assert os.path.isfile(p), "%s not created next to the database" % f
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
        c.user_token = open(os.path.join(d, "user.token")).read().strip()
        assert Api(c).get("/v1/jobs").status == 200
        db = os.path.join(d, "x.db")
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600, "database %s is not 0600" % db
    finally:
        c.stop()


def test_auth_log_level_flag_wins_over_the_environment():
    """--log-level is the level even where DDP_LOG_LEVEL says another (as for the agent);
    DDP_LOG_LEVEL alone still sets it."""
    for env, flag, quiet in (("debug", ["--log-level", "error"], True),
                             ("error", [], True), ("info", [], False)):
        c = Cluster(node_timeout=300)
        try:
            c.ddpd = c._spawn([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % c.port,
                               "--db", os.path.join(c.tmp, "x.db")] + flag, "ddpd.log",
                              env={"DDP_LOG_LEVEL": env})
            wait_for("ddpd /healthz", c._healthy, timeout=20)
            log = c.log("ddpd.log")
            assert (" INFO " not in log and " DEBUG " not in log) == quiet, (env, flag, log)
        finally:
            c.stop()


def test_auth_weak_token_files_refused():
    """A token file holding one byte, or a link, stops ddpd at start with a message naming the
    file; a token file others may read starts it with a warning naming the chmod."""
    d = tempfile.mkdtemp(prefix="ddp-weak-")
    weak, good, link = (os.path.join(d, n) for n in ("weak", "good", "link"))
    with open(weak, "w") as f:
        f.write("x\n")
    with open(good, "w") as f:
        f.write("agent-secret-0123456789abcdef\n")
    os.chmod(good, 0o644)
    os.symlink(good, link)
    ddpd = os.path.join(BIN, "ddpd")
    for bad, part in ((weak, "is 1 bytes: at least 16"), (link, "symbolic link")):
        out = subprocess.run([ddpd, "--listen", "127.0.0.1:0", "--db", os.path.join(d, "w.db"),
                              "--token-file", bad, "--agent-token-file", good],
                             capture_output=True, timeout=30)
        text = (out.stdout + out.stderr).decode()
        assert out.returncode != 0 and part in text and bad in text, (out.returncode, text)
    c = Cluster(node_timeout=300)
    try:
        with open(os.path.join(d, "user"), "w") as f:
            f.write("user-secret-0123456789abcdef\n")
        os.chmod(os.path.join(d, "user"), 0o600)
        c.ddpd = c._spawn([ddpd, "--listen", "127.0.0.1:%d" % c.port, "--db",
                           os.path.join(d, "ok.db"), "--token-file", os.path.join(d, "user"),
                           "--agent-token-file", good], "ddpd.log")
        wait_for("ddpd /healthz", c._healthy, timeout=20)
        log = c.log("ddpd.log")
        assert "is mode 0644" in log and "chmod 600 " + good in log, log[-2000:]
    finally:
        c.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_auth_tls():
    """--tls-cert / --tls-key: HTTPS with a self-signed certificate; the same API and auth."""
    if not shutil.which("openssl"):
        raise AssertionError("openssl (Debian package openssl) is needed for the TLS test")
    c = Cluster(node_timeout=300)
    try:
        cert, key = os.path.join(c.tmp, "cert.pem"), os.path.join(c.tmp, "key.pem")
        p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-keyout", key, "-out", cert, "-days", "2", "-subj",
                            "/CN=127.0.0.1"], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        c.ddpd = c._spawn([os.path.join(BIN, "ddpd"), "--listen", "127.0.0.1:%d" % c.port,
                           "--tls-cert", cert, "--tls-key", key], "ddpd.log")
        ctx = ssl.create_default_context(cafile=cert)
        ctx.check_hostname = False
        url = "https://127.0.0.1:%d" % c.port

        def get(path, token=None):
            req = urllib.request.Request(url + path)
            if token:
                req.add_header("Authorization", "Bearer " + token)
            try:
                with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        def up():
            if c.ddpd.poll() is not None:
                raise AssertionError("ddpd exited: " + c.log("ddpd.log"))
            try:
                return get("/healthz") == 200
            except OSError:
                return False
        wait_for("ddpd over HTTPS", up, timeout=20)
        user = open(os.path.join(c.home, "user.token")).read().strip()
        assert get("/v1/jobs", user) == 200
        assert get("/v1/jobs") == 401
        # Plain HTTP on the TLS port gets no API answer.
        try:
            plain = urllib.request.urlopen("http://127.0.0.1:%d/healthz" % c.port,
                                           timeout=10).status
        except (OSError, ValueError, urllib.error.HTTPError):
            plain = None
        assert plain != 200, "plain HTTP answered on the TLS port"
    finally:
        c.stop()


def test_auth_answered_before_the_body():
    """A request without a valid token is answered from its headers alone: ddpd never waits for
    (or buffers) the body of a stranger. (Holding 10,000 idle connections is api_flood's.)"""
    import socket
    import time
    with cluster(node_timeout=300) as c:
        def head_only(token):
            s = socket.create_connection(("127.0.0.1", c.port), timeout=10)
            h = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            if token:
                h += "Authorization: Bearer %s\r\n" % token
            h += "Content-Length: %d\r\n\r\n" % (1 << 20)
            s.sendall(h.encode())
            return s
        for token, status in ((None, 401), ("wrong-token-0123456789", 401),
                              (c.agent_token, 403)):
            s = head_only(token)
            s.settimeout(5)
            t0 = time.monotonic()
            data = s.recv(4096)  # no body byte was sent
            s.close()
            assert data.startswith(b"HTTP/1.1 %d" % status), (token, data[:200])
            assert time.monotonic() - t0 < 5, "answered only after %.1f s" % (
                time.monotonic() - t0)
        # With the user token the body is awaited (nothing comes back without it).
        s = head_only(c.user_token)
        s.settimeout(1)
        try:
            data = s.recv(4096)
        except socket.timeout:
            data = b""
        s.close()
        assert data == b"", "answered a valid request before its body: %r" % data[:200]



def test_auth_checked_again_when_the_body_is_in():
    """The headers' check is not the last word: a token rotated (or a user removed) while the
    body still comes opens nothing, and the call does nothing (a body may take long: the idle
    timeout restarts with each byte)."""
    import json
    import socket
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a = api.post("/v1/users", {"name": "mallory", "role": "user"})
        assert a.status == 201, a
        old = a.json["token"]
        body = json.dumps({"command": ["true"], "nnodes": "5"}).encode()
        s = socket.create_connection(("127.0.0.1", c.port), timeout=10)
        s.sendall(("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
                   % (old, len(body))).encode())
        s.sendall(body[:5])
        r = api.post("/v1/users/mallory:rotate-token")
        assert r.status == 200, r
        s.sendall(body[5:])
        s.settimeout(10)
        data = s.recv(4096)
        s.close()
        assert data.startswith(b"HTTP/1.1 401"), data[:300]
        jobs = api.get("/v1/jobs?all=true").json["jobs"]
        assert not [j for j in jobs if j.get("owner") == "mallory"], jobs
        # the new token works
        assert api.post("/v1/jobs", {"command": ["true"], "nnodes": "5"},
                        token=r.json["token"]).status == 201


if __name__ == "__main__":
    api_sim.run_tests(globals())
