"""Users, roles, owners and node credentials on a real ddpd (a real SQLite file), driven over
HTTP and with the real ddpctl:

- the role matrix: every call of the API with every kind of credential (none, a wrong one,
  admin, the owner, another user, a viewer, the bootstrap token, the node's own credential,
  another node's), each cell checked against the answer written down in docs/security.md;
  printed as a table;
- ddpctl users add/list/rotate-token/remove, whoami, list --all and the OWNER column, token
  files of mode 0600, the last admin kept;
- a job another user may not see is 404 with the same message as a job that never existed;
- the bootstrap token cannot take a live node's name, register 10,000 nodes (--max-nodes) or
  act for a node; a removed node's credential opens nothing;
- submit with an Idempotency-Key returns the same job, and refuses the key with another spec;
- --max-jobs-per-user answers 429 naming the flag;
- a user token survives a restart of ddpd (only its hash is stored).
"""
import json
import os
import re
import sqlite3
import stat

from api_sim import Api, SimNode, cluster, expect_error, run_tests
from cli_util import ctl, ctl_env

OK, E401, E403, E404 = "ok", 401, 403, 404

WHO = ("none", "wrong", "admin", "owner", "other", "viewer", "bootstrap", "node", "node-b")


def add_user(api, name, role):
    a = api.post("/v1/users", {"name": name, "role": role})
    assert a.status == 201, a
    assert set(a.json) == {"user", "token"} and a.json["user"]["role"] == role, a
    return a.json["token"]


def setup_world(c, api):
    """Users alice (user, the owner), bob (user), vera (viewer); nodes na, nb; alice's job."""
    toks = {"none": None, "wrong": "wrong-token-0123456789abcdef", "admin": c.user_token,
            "bootstrap": c.agent_token}
    toks["owner"] = add_user(api, "alice", "user")
    toks["other"] = add_user(api, "bob", "user")
    toks["viewer"] = add_user(api, "vera", "viewer")
    add_user(api, "tgt", "user")  # whose token others try to rotate
    na, nb = SimNode(api, "na", slots=1), SimNode(api, "nb", slots=1)
    na.register()
    nb.register()
    toks["node"], toks["node-b"] = c.node_creds["na"], c.node_creds["nb"]
    a = api.post("/v1/jobs", {"command": ["true"], "nnodes": "5"}, token=toks["owner"])
    assert a.status == 201 and a.json["owner"] == "alice", a
    return toks, na, a.json["id"]


def test_role_matrix():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        toks, na, jid = setup_world(c, api)
        beat = lambda: na.beat_body()  # noqa: E731
        n = [0]

        def fresh(prefix):
            n[0] += 1
            return "%s%d" % (prefix, n[0])

        def add_then_remove(t):
            name = fresh("tmp")
            add_user(api, name, "user")
            return api.request("DELETE", "/v1/users/" + name, token=t)

        def delete_finished(t):
            # a fresh finished job of the owner's for each caller: a deletion that works
            # leaves none for the next one
            a = api.post("/v1/jobs", {"command": ["true"], "nnodes": "5"}, token=toks["owner"])
            assert a.status == 201, a
            assert api.post("/v1/jobs/%s:cancel" % a.json["id"], token=toks["owner"]).status == 200
            return api.request("DELETE", "/v1/jobs/" + a.json["id"], token=t)

        def live_job():
            a = api.post("/v1/jobs", {"command": ["true"], "nnodes": "5"}, token=toks["owner"])
            assert a.status == 201, a
            return a.json["id"]

        def remove_node(t):
            name = fresh("gone")
            SimNode(api, name, slots=1).register()
            return api.request("DELETE", "/v1/nodes/" + name, token=t)

        def rotate_own(t, who):
            name = {"admin": "admin", "owner": "alice", "other": "bob",
                    "viewer": "vera"}.get(who, "alice")
            a = api.post("/v1/users/%s:rotate-token" % name, token=t)
            if a.status == 200:  # the matrix goes on with the new token
                toks[who] = a.json["token"]
                if who == "admin":
                    c.user_token = a.json["token"]
            return a

        U = {"none": E401, "wrong": E401, "bootstrap": E403, "node": E403, "node-b": E403}
        calls = [
            ("POST /v1/jobs", lambda t, w: api.post("/v1/jobs", {"command": ["true"]}, token=t),
             dict(U, admin=OK, owner=OK, other=OK, viewer=E403)),
            ("GET /v1/jobs", lambda t, w: api.get("/v1/jobs", token=t),
             dict(U, admin=OK, owner=OK, other=OK, viewer=OK)),
            ("GET /v1/jobs?all=true", lambda t, w: api.get("/v1/jobs?all=true", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=OK)),
            ("GET /v1/jobs/{owner's}", lambda t, w: api.get("/v1/jobs/" + jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=OK)),
            ("GET .../events", lambda t, w: api.get("/v1/jobs/%s/events" % jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=OK)),
            ("GET .../metrics", lambda t, w: api.get("/v1/jobs/%s/metrics" % jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=OK)),
            ("GET .../logs", lambda t, w: api.get("/v1/jobs/%s/logs" % jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=OK)),
            ("GET .../logs:download",
             lambda t, w: api.get("/v1/jobs/%s/logs:download" % jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=OK)),
            ("DELETE /v1/jobs/{owner's finished}", lambda t, w: delete_finished(t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=E403)),
            ("POST .../{owner's}:cancel",
             lambda t, w: api.post("/v1/jobs/%s:cancel" % jid, token=t),
             dict(U, admin=OK, owner=OK, other=E404, viewer=E403)),
            ("PATCH /v1/jobs/{owner's}",
             lambda t, w: api.request("PATCH", "/v1/jobs/" + live_job(), {"priority": -1},
                                      token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("GET /v1/nodes", lambda t, w: api.get("/v1/nodes", token=t),
             dict(U, admin=OK, owner=OK, other=OK, viewer=OK)),
            ("POST /v1/nodes/{nb}:cordon",
             lambda t, w: api.post("/v1/nodes/nb:cordon", {"reason": "x"}, token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("POST /v1/nodes/{nb}:drain",
             lambda t, w: api.post("/v1/nodes/nb:drain", {}, token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("POST /v1/nodes/{nb}:uncordon",
             lambda t, w: api.post("/v1/nodes/nb:uncordon", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("DELETE /v1/nodes/{name}", lambda t, w: remove_node(t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("GET /v1/openapi.json", lambda t, w: api.get("/v1/openapi.json", token=t),
             dict(U, admin=OK, owner=OK, other=OK, viewer=OK)),
            ("GET /v1/me", lambda t, w: api.get("/v1/me", token=t),
             dict(U, admin=OK, owner=OK, other=OK, viewer=OK)),
            ("GET /v1/users", lambda t, w: api.get("/v1/users", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("POST /v1/users",
             lambda t, w: api.post("/v1/users", {"name": fresh("new")}, token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("PATCH /v1/users/{name}",
             lambda t, w: api.request("PATCH", "/v1/users/tgt", {"max_slots": 8}, token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("DELETE /v1/users/{name}", lambda t, w: add_then_remove(t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("POST /v1/users/{own}:rotate-token", rotate_own,
             dict(U, admin=OK, owner=OK, other=OK, viewer=OK)),
            ("POST /v1/users/{other}:rotate-token",
             lambda t, w: api.post("/v1/users/tgt:rotate-token", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("GET /v1/groups", lambda t, w: api.get("/v1/groups", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("PUT /v1/groups/{name}",
             lambda t, w: api.request("PUT", "/v1/groups/grp", {"max_slots": 8}, token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("GET /v1/groups/{name}", lambda t, w: api.get("/v1/groups/grp", token=t),
             dict(U, admin=OK, owner=E403, other=E403, viewer=E403)),
            ("POST /v1/nodes:register",
             lambda t, w: api.post("/v1/nodes:register", {
                 "name": fresh("reg"), "address": "127.0.0.1", "slots": 1,
                 "incarnation": "x"}, token=t),
             dict(U, admin=E403, owner=E403, other=E403, viewer=E403, bootstrap=OK)),
            ("POST /v1/nodes/{na}:heartbeat",
             lambda t, w: api.post("/v1/nodes/na:heartbeat", beat(), token=t),
             dict(U, admin=E403, owner=E403, other=E403, viewer=E403, node=OK)),
        ]
        bad, rows = [], []
        for name, fn, want in calls:
            row = []
            for who in WHO:
                t = toks[who]
                a = fn(t, who)
                got = OK if 200 <= a.status < 300 else a.status
                row.append("ok" if got == OK else str(got))
                if got != want[who]:
                    bad.append("%s as %s: expected %s, got %r" % (name, who, want[who], a))
                elif got != OK:
                    try:
                        expect_error(a, got, None, "%s as %s" % (name, who))
                    except AssertionError as e:
                        bad.append(str(e))
                if who == "other" and got == E404:
                    # the same answer as a job that never existed
                    ghost = re.sub(r"j-[0-9]+", "j-999", a.json["error"]["message"])
                    g = api.get("/v1/jobs/j-999", token=t)
                    assert g.json["error"]["message"] == ghost, (a, g)
                    assert "alice" not in a.text, a
            rows.append((name, row))
        print("%-36s %s" % ("call", " ".join("%-9s" % w for w in WHO)))
        for name, row in rows:
            print("%-36s %s" % (name, " ".join("%-9s" % x for x in row)))
        assert not bad, "\n".join(bad)


def test_users_with_ddpctl():
    with cluster(node_timeout=300) as c:
        out = os.path.join(c.tmp, "alice.token")
        r = ctl(c, "users", "add", "alice", "--token-out", out)
        assert r.rc == 0 and out in r.out, r
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600, oct(os.stat(out).st_mode)
        r = ctl(c, "users", "add", "vera", "--role", "viewer", cwd=c.tmp)
        assert r.rc == 0 and os.path.exists(os.path.join(c.tmp, "vera.token")), r
        r = ctl(c, "users", "add", "alice")
        assert r.rc == 1 and "already exists" in r.err, r
        r = ctl(c, "users", "add", "x", "--role", "root")
        assert r.rc == 1 and "'role'" in r.err, r
        r = ctl(c, "users", "list")
        assert r.rc == 0, r
        names = [ln.split()[:2] for ln in r.out.splitlines()[1:]]
        assert names == [["admin", "admin"], ["alice", "user"], ["vera", "viewer"]], r
        env_a = ctl_env(c, home=False, extra={"DDP_TOKEN": open(out).read().strip()})
        r = ctl(c, "whoami", env=env_a)
        assert r.rc == 0 and r.out.strip() == "alice (role user)", r
        r = ctl(c, "users", "list", env=env_a)
        assert r.rc == 1 and "role admin" in r.err, r
        # alice's and admin's jobs; alice lists her own, admin --all sees both with owners
        r = ctl(c, "submit", "--nnodes", "4", "--parsable", "--", "true", env=env_a)
        assert r.rc == 0, r
        ja = r.out.strip()
        r = ctl(c, "submit", "--nnodes", "4", "--parsable", "--", "true")
        jb = r.out.strip()
        r = ctl(c, "list", env=env_a)
        assert [ln.split()[0] for ln in r.out.splitlines()[1:]] == [ja], r
        r = ctl(c, "list", "--all", env=env_a)
        assert r.rc == 1 and "admin or viewer" in r.err, r
        r = ctl(c, "list", "--all")
        rows = [ln.split()[:3] for ln in r.out.splitlines()[1:]]
        assert rows == [[jb, "job", "admin"], [ja, "job", "alice"]], r
        r = ctl(c, "status", jb, env=env_a)
        assert r.rc == 1 and "not found" in r.err, r
        r = ctl(c, "cancel", jb, env=env_a)
        assert r.rc == 1 and "not found" in r.err, r
        env_v = ctl_env(c, home=False, extra={
            "DDP_TOKEN": open(os.path.join(c.tmp, "vera.token")).read().strip()})
        r = ctl(c, "status", ja, env=env_v)
        assert r.rc == 0, r
        r = ctl(c, "cancel", ja, env=env_v)
        assert r.rc == 1 and "may not change it" in r.err, r
        r = ctl(c, "cancel", ja, env=env_a)
        assert r.rc == 0, r
        ev = Api(c).events(ja)
        assert any("cancelled by alice" in e["reason"] for e in ev), ev
        # A --token-out where no file can be made fails before ddpd is asked: no user made,
        # no token rotated (alice's own rotation could not be undone by her).
        nowhere = os.path.join(c.tmp, "no-such-folder", "t.token")
        r = ctl(c, "users", "add", "walt", "--token-out", nowhere)
        assert r.rc == 1 and "cannot write a token to %s" % nowhere in r.err and \
            "nothing was asked of ddpd" in r.err, r
        assert "walt" not in [u["name"] for u in Api(c).get("/v1/users").json["users"]]
        r = ctl(c, "users", "rotate-token", "alice", "--token-out", nowhere, env=env_a)
        assert r.rc == 1 and "nothing was asked of ddpd" in r.err, r
        # a folder where the file should go: the rename after the answer would fail
        r = ctl(c, "users", "rotate-token", "alice", "--token-out", c.tmp, env=env_a)
        assert r.rc == 1 and "it is there and not a regular file (nothing was asked of ddpd)" \
            in r.err, r
        r = ctl(c, "whoami", env=env_a)
        assert r.rc == 0 and "alice" in r.out, r
        # -o json: the user and the file, never the token; no temporary file left beside it
        wout = os.path.join(c.tmp, "walt.token")
        r = ctl(c, "-o", "json", "users", "add", "walt", "--token-out", wout)
        assert r.rc == 0, r
        j = json.loads(r.out)
        assert j["token_file"] == wout and j["user"]["name"] == "walt" and "token" not in j, j
        assert stat.S_IMODE(os.stat(wout).st_mode) == 0o600
        assert sorted(f for f in os.listdir(c.tmp) if f.startswith("walt.token")) == \
            ["walt.token"], os.listdir(c.tmp)
        # rotate: the old token stops working, the new one works; alice may rotate her own
        r = ctl(c, "users", "rotate-token", "alice", "--token-out", out, env=env_a)
        assert r.rc == 0, r
        r = ctl(c, "whoami", env=env_a)
        assert r.rc == 1 and "refused" in r.err, r
        r = ctl(c, "--token-file", out, "whoami", home=False)
        assert r.rc == 0 and "alice" in r.out, r
        # tokens are stored as hashes only, and survive a restart of ddpd
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(c.home, "ddp.db"), uri=True)
        hashes = [row[0] for row in db.execute("SELECT token_hash FROM users")]
        dump = "\n".join(db.iterdump())
        db.close()
        assert open(out).read().strip() not in dump and c.user_token not in dump
        assert all(len(h) == 64 for h in hashes), hashes
        c.kill_ddpd()
        c.start_ddpd()
        r = ctl(c, "--token-file", out, "whoami", home=False)
        assert r.rc == 0 and "alice" in r.out, r
        # remove: the last admin stays; alice's job stays, owned by her
        r = ctl(c, "users", "remove", "admin")
        assert r.rc == 1 and "last admin" in r.err, r
        r = ctl(c, "users", "remove", "alice")
        assert r.rc == 0, r
        r = ctl(c, "--token-file", out, "whoami", home=False)
        assert r.rc == 1, r
        assert Api(c).job(ja)["owner"] == "alice"
        # jobs belong to a name: a new alice would read the removed one's, so the name is
        # refused while they are kept (delete them, or take another name)
        r = ctl(c, "users", "add", "alice", "--token-out", out)
        assert r.rc == 1 and "the name alice still owns 1 job of a removed user (%s)" % ja \
            in r.err, r
        assert ctl(c, "delete", ja).rc == 0
        r = ctl(c, "users", "add", "alice", "--token-out", out)
        assert r.rc == 0, r
        # a user whose jobs have not ended is not removed (they would run on out of every
        # quota): cancel them first
        env_new = ctl_env(c, home=False, extra={"DDP_TOKEN": open(out).read().strip()})
        r = ctl(c, "submit", "--parsable", "--", "true", env=env_new)
        assert r.rc == 0, r
        jn = r.out.strip()
        r = ctl(c, "users", "remove", "alice")
        assert r.rc == 1 and "user alice has 1 job not ended (%s): cancel it first" % jn \
            in r.err, r
        assert ctl(c, "cancel", jn).rc == 0
        assert ctl(c, "users", "remove", "alice").rc == 0


def test_node_credentials_and_caps():
    with cluster(node_timeout=300, ddpd_args=["--max-nodes", "3",
                                               "--max-jobs-per-user", "2"]) as c:
        api = Api(c)
        na = SimNode(api, "na", slots=1)
        na.register()
        cred = c.node_creds["na"]
        # the bootstrap token alone cannot take the live name (nor learn the job's secrets)
        a = api.post("/v1/nodes:register", {"name": "na", "address": "127.0.0.2", "slots": 4,
                                            "incarnation": "evil"}, token="agent")
        expect_error(a, 409, "registered and up", "re-register without credential")
        a = api.post("/v1/nodes/na:heartbeat", na.beat_body(), token="agent")
        expect_error(a, 403, "own credential", "bootstrap token on a heartbeat")
        # the node's own agent takes it over again (credential shown), getting a new one
        na.register()
        assert c.node_creds["na"] != cred
        a = api.post("/v1/nodes/na:heartbeat", na.beat_body(), token=cred)
        expect_error(a, 401, None, "the previous credential")
        na.beat()
        # another node's credential is refused on this node's heartbeat
        nb = SimNode(api, "nb", slots=1)
        nb.register()
        a = api.post("/v1/nodes/na:heartbeat", na.beat_body(), token=c.node_creds["nb"])
        expect_error(a, 403, "node nb", "another node's credential")
        # --max-nodes 3
        SimNode(api, "nc", slots=1).register()
        a = api.post("/v1/nodes:register", {"name": "nd", "address": "127.0.0.1", "slots": 1,
                                            "incarnation": "x"}, token="agent")
        expect_error(a, 429, "--max-nodes", "a fourth node")
        # an admin removes a node: its credential opens nothing, room for another
        a = api.request("DELETE", "/v1/nodes/nc")
        assert a.status == 200 and a.json["node"]["name"] == "nc", a
        assert "nc" not in api.nodes()
        a = api.post("/v1/nodes/nc:heartbeat", {"incarnation": "x"},
                     token=c.node_creds["nc"])
        expect_error(a, 401, None, "a removed node's credential")
        r = ctl(c, "nodes", "remove", "nb")
        assert r.rc == 0 and "removed node nb" in r.out, r
        r = ctl(c, "nodes", "remove", "nb")
        assert r.rc == 1 and "not registered" in r.err, r
        SimNode(api, "nd", slots=1).register()
        # --max-jobs-per-user 2 (jobs not yet ended)
        j1 = api.submit({"command": ["true"], "nnodes": "9"})
        api.submit({"command": ["true"], "nnodes": "9"})
        a = api.post("/v1/jobs", {"command": ["true"]})
        expect_error(a, 429, "--max-jobs-per-user", "a third job")
        api.post("/v1/jobs/%s:cancel" % j1["id"])
        api.wait_state(j1["id"], "CANCELLED")
        assert api.post("/v1/jobs", {"command": ["true"], "nnodes": "9"}).status == 201


def test_idempotent_submit():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        spec = {"command": ["true"], "nnodes": "7", "name": "once"}
        key = {"Idempotency-Key": "req-0123456789"}
        a = api.post("/v1/jobs", spec, headers=key)
        assert a.status == 201, a
        b = api.post("/v1/jobs", spec, headers=key)
        assert b.status == 200 and b.json["id"] == a.json["id"], b
        # another user's same key is another job
        tok = add_user(api, "alice", "user")
        d = api.post("/v1/jobs", spec, headers=key, token=tok)
        assert d.status == 201 and d.json["id"] != a.json["id"], d
        e = api.post("/v1/jobs", dict(spec, name="other"), headers=key)
        expect_error(e, 409, "Idempotency-Key", "the key with another spec")
        f = api.post("/v1/jobs", spec, headers={"Idempotency-Key": "a b"})
        expect_error(f, 400, "Idempotency-Key", "a key with a space")
        # the key survives a restart of ddpd: a client retrying after a crash gets its job
        c.kill_ddpd()
        c.start_ddpd()
        g = api.post("/v1/jobs", spec, headers=key)
        assert g.status == 200 and g.json["id"] == a.json["id"], g
        assert len(api.all_jobs()) == 1, api.all_jobs()
        # an admin's priority change in between does not turn the client's retry into a 409
        assert api.request("PATCH", "/v1/jobs/" + a.json["id"], {"priority": 5}).status == 200
        h = api.post("/v1/jobs", spec, headers=key)
        assert h.status == 200 and h.json["id"] == a.json["id"] and \
            h.json["spec"]["priority"] == 5, h


if __name__ == "__main__":
    run_tests(globals())
