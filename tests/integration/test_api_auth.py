"""Auth of a real ddpd: token files created with mode 0600 next to the database, no or a wrong
token 401 UNAUTHENTICATED, the agent token on user calls and the user token on agent calls 403
PERMISSION_DENIED, /healthz and /metrics open; explicit --token-file / --agent-token-file are
used as given. No refused call changes the database."""
import os
import stat

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
    import tempfile
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


if __name__ == "__main__":
    api_sim.run_tests(globals())
