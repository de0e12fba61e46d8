"""The scheduler on a real ddpd with simulated agents, driven with the real ddpctl:

- a drain moves an elastic job off a node at no restart's cost (restarts stay 0), the HOLD
  shows in `ddpctl nodes`, and uncordon takes the node back;
- priorities: a later high-priority job starts before an earlier one; `ddpctl list` and
  `status` say why the others wait (reason and queue position); `ddpctl update` reorders;
  a user may not raise its priority above --max-user-priority;
- a user's quota: a job past it waits with reason Quota until an admin raises it;
- a group's quota: two users of one group share it; the second's job waits with Quota naming
  the group until an admin raises the group's quota (`ddpctl groups set`).
"""
from api_sim import Api, SimNode, beat_all, cluster, run_tests, wait_for
from cli_util import ctl, ctl_env


def test_drain_moves_an_elastic_job_off_at_no_cost():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        na, nb = SimNode(api, "na", slots=1), SimNode(api, "nb", slots=1, address="127.0.0.2")
        na.register()
        nb.register()
        job = api.submit({"command": ["w"], "nnodes": "1:2"})
        j = api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        assert len(j["nodes"]) == 2, j
        r = ctl(c, "nodes", "drain", "nb", "--reason", "disk swap")
        assert r.rc == 0 and "drained" in r.out, r
        r = ctl(c, "nodes")
        row = [ln for ln in r.out.splitlines() if ln.startswith("nb ")]
        assert row and "drain: disk swap" in row[0], r
        nb.workers = {}  # nb's agent stops the old workers
        wait_for("generation 2 on na only", lambda: beat_all([na, nb]) or (
            lambda j: j["generation"] == 2 and j["state"] == "RUNNING" and
            [n["name"] for n in j["nodes"]] == ["na"])(api.job(job["id"])), timeout=30)
        j = api.job(job["id"])
        assert j["restarts"] == 0, j
        ev = api.events(job["id"])
        assert any("node nb drained by an admin: disk swap" in e["reason"] for e in ev), ev
        # stopping the drained node's agent now costs the job nothing
        assert api.job(job["id"])["generation"] == 2
        r = ctl(c, "nodes", "uncordon", "nb")
        assert r.rc == 0 and "schedulable again" in r.out, r
        # the job grows back onto it (scale-up, not a restart)
        wait_for("generation 3 on both", lambda: beat_all([na, nb]) or (
            lambda j: j["generation"] == 3 and len(j["nodes"]) == 2)(api.job(job["id"])),
            timeout=30)
        assert api.job(job["id"])["restarts"] == 0
        r = ctl(c, "nodes", "drain", "nb", env=ctl_env(c, home=False, extra={
            "DDP_TOKEN": api.post("/v1/users", {"name": "u"}).json["token"]}))
        assert r.rc == 1 and "role admin" in r.err, r


def test_priorities_and_why_pending():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "na", slots=1)
        n.register()
        first = api.submit({"command": ["w"]})
        api.wait_state(first["id"], "RUNNING", poke=n.beat)
        low = api.submit({"command": ["w"], "name": "low"})
        r = ctl(c, "submit", "--priority", "7", "--name", "high", "--parsable", "--", "w")
        assert r.rc == 0, r
        high = r.out.strip()
        r = ctl(c, "list")
        rows = {ln.split()[0]: ln for ln in r.out.splitlines()[1:]}
        assert "Resources (#1)" in rows[high] and "Resources (#2)" in rows[low["id"]], r
        r = ctl(c, "status", low["id"])
        assert "pending:     Resources (#2 in the queue), needs 1 node x 1 free slots" in r.out, r
        assert "priority:    0" in r.out and "owner:       admin" in r.out, r
        # an admin lowers high below low: low is next now
        r = ctl(c, "update", high, "--priority", "-1")
        assert r.rc == 0 and "priority -1" in r.out, r
        assert api.job(low["id"])["pending"]["position"] == 1
        api.post("/v1/jobs/%s:cancel" % first["id"])
        n.workers = {}
        api.wait_state(low["id"], "RUNNING", poke=n.beat)
        assert api.job(high)["state"] == "PENDING"
        # a user may lower its priority, not raise it (--max-user-priority 0)
        tok = api.post("/v1/users", {"name": "alice"}).json["token"]
        env = ctl_env(c, home=False, extra={"DDP_TOKEN": tok})
        r = ctl(c, "submit", "--priority", "3", "--", "w", env=env)
        assert r.rc == 1 and "--max-user-priority" in r.err, r
        r = ctl(c, "submit", "--priority", "-3", "--", "w", env=env)
        assert r.rc == 0, r
        r = ctl(c, "update", high, "--priority", "5", env=env)
        assert r.rc == 1 and "role admin" in r.err, r  # changing priorities is for admins


def test_quota_waits_until_raised():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "na", slots=4)
        n.register()
        r = ctl(c, "users", "add", "alice", "--max-slots", "2", "--token-out",
                c.tmp + "/alice.token")
        assert r.rc == 0, r
        r = ctl(c, "users", "list")
        assert any(ln.split()[:3] == ["alice", "user", "2"] for ln in r.out.splitlines()), r
        tok = open(c.tmp + "/alice.token").read().strip()
        a = api.post("/v1/jobs", {"command": ["w"], "nproc_per_node": 2}, token=tok)
        b = api.post("/v1/jobs", {"command": ["w"], "nproc_per_node": 2}, token=tok)
        assert a.status == b.status == 201, (a, b)
        api.wait_state(a.json["id"], "RUNNING", poke=n.beat)
        p = api.get("/v1/jobs/" + b.json["id"], token=tok).json["pending"]
        assert p["reason"] == "Quota" and "holds 2 of its 2 slots" in p["message"], p
        r = ctl(c, "users", "set", "alice", "--max-slots", "4")
        assert r.rc == 0 and "max slots 4" in r.out, r
        api.wait_state(b.json["id"], "RUNNING", poke=n.beat)


def test_group_quota_waits_until_raised():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "na", slots=8)
        n.register()
        toks = {}
        for u in ("alice", "bob"):
            r = ctl(c, "users", "add", u, "--group", "ml", "--token-out", c.tmp + "/%s.token" % u)
            assert r.rc == 0, r
            toks[u] = open(c.tmp + "/%s.token" % u).read().strip()
        r = ctl(c, "users", "set", "bob", "--group", "ml")
        assert r.rc == 0 and "group ml" in r.out, r
        r = ctl(c, "groups", "set", "ml", "--max-slots", "2")
        assert r.rc == 0 and "max slots 2" in r.out, r
        # a user outside the group is not held back by it
        r = ctl(c, "users", "add", "carol", "--token-out", c.tmp + "/carol.token")
        assert r.rc == 0, r
        a = api.post("/v1/jobs", {"command": ["w"], "nproc_per_node": 2}, token=toks["alice"])
        assert a.status == 201, a
        api.wait_state(a.json["id"], "RUNNING", poke=n.beat)
        b = api.post("/v1/jobs", {"command": ["w"], "nproc_per_node": 2}, token=toks["bob"])
        assert b.status == 201, b
        p = wait_for("bob's job waits", lambda: api.get("/v1/jobs/" + b.json["id"],
                                                        token=toks["bob"]).json.get("pending"),
                     timeout=10)
        assert p["reason"] == "Quota" and "group ml" in p["message"], p
        assert "holds 2 of its 2 slots" in p["message"], p
        r = ctl(c, "groups", "list")
        assert r.rc == 0, r
        row = [ln.split() for ln in r.out.splitlines() if ln.startswith("ml ")]
        assert row and row[0][1:4] == ["2", "2", "alice,bob"], r
        g = api.get("/v1/groups/ml").json["group"]
        assert g == {"name": "ml", "max_slots": 2, "slots_used": 2,
                     "users": ["alice", "bob"]}, g
        # only an admin sets a group's quota; a bad one is a 400 naming the field
        a2 = api.request("PUT", "/v1/groups/ml", {"max_slots": 8}, token=toks["alice"])
        assert a2.status == 403, a2
        a2 = api.request("PUT", "/v1/groups/ml", {"max_slots": -1})
        assert a2.status == 400 and "max_slots" in a2.json["error"]["message"], a2
        a2 = api.request("PATCH", "/v1/users/bob", {"group": "no way"})
        assert a2.status == 400 and "'group'" in a2.json["error"]["message"], a2
        r = ctl(c, "groups", "set", "ml", "--max-slots", "4")
        assert r.rc == 0 and "max slots 4" in r.out, r
        api.wait_state(b.json["id"], "RUNNING", poke=n.beat)
        r = ctl(c, "users", "list")
        assert any(ln.split()[:4] == ["bob", "user", "-", "ml"] for ln in r.out.splitlines()), r


def test_labels_of_real_agents_and_node_selector():
    """Real agents report their --label flags and what they detect; a job's node_selector
    places it on the matching node only; an unknown label waits with reason NodeSelector."""
    with cluster(node_timeout=300) as c:
        c.start_agent("plain", slots=1)
        c.start_agent("fast", slots=1, extra=["--label", "zone=b", "--label", "cpus=99"])
        c.wait_nodes_ready(["plain", "fast"])
        nodes = {n["name"]: n for n in c.get("/v1/nodes").json["nodes"]}
        assert nodes["fast"]["labels"]["zone"] == "b", nodes["fast"]
        assert nodes["fast"]["labels"]["cpus"] == "99", nodes["fast"]  # a flag overrides
        assert int(nodes["plain"]["labels"]["cpus"]) >= 1 and "gpus" in nodes["plain"]["labels"]
        r = ctl(c, "submit", "--node-selector", "zone=b", "--parsable", "--", "sleep", "30")
        assert r.rc == 0, r
        j = c.wait_state(r.out.strip(), "RUNNING", timeout=30)
        assert [n["name"] for n in j["nodes"]] == ["fast"], j
        r = ctl(c, "submit", "--node-selector", "gpu=h200", "--parsable", "--", "true")
        p = wait_for("NodeSelector", lambda: c.job(r.out.strip())["pending"], timeout=10)
        assert p["reason"] == "NodeSelector" and "gpu" in p["message"], p
        r = ctl(c, "submit", "--node-selector", "bad key=1", "--", "true")
        assert r.rc == 1 and "node_selector" in r.err, r


def test_crash_loop_backs_off():
    """A command that fails at once, under a real agent: its restarts back off (none before
    the first, then 1 s, then 2 s), and it ends FAILED with its 3 restarts spent."""
    import calendar
    import time as _t
    with cluster(node_timeout=10) as c:
        c.start_agent("a", slots=1)
        c.wait_nodes_ready(["a"])
        job = c.submit({"command": ["false"], "max_restarts": 3, "grace_period_s": 1})
        done = c.wait_state(job["id"], ("FAILED", "SUCCEEDED"), timeout=60)
        assert done["state"] == "FAILED" and done["restarts"] == 3, done
        ev = c.get("/v1/jobs/%s/events" % job["id"]).json["events"]

        def t(e):
            base, ms = e["time"][:19], int(e["time"][20:23])
            return calendar.timegm(_t.strptime(base, "%Y-%m-%dT%H:%M:%S")) + ms / 1000.0
        starts = {e["generation"]: t(e) for e in ev if e["state"] == "RUNNING"}
        ends = {e["generation"]: t(e) for e in ev if e["state"] == "RESTARTING"}
        gaps = [starts[g + 1] - ends[g] for g in (1, 2, 3)]
        print("crash loop: waits before generations 2, 3, 4: %s s" %
              ", ".join("%.2f" % x for x in gaps))
        assert gaps[0] < 1.0 and gaps[1] >= 0.9 and gaps[2] >= 1.9, gaps


def test_preemption_tries_again_when_its_room_was_taken():
    """H (priority 10) preempts a job; while that one drains, X (priority 20) comes and takes
    the room when it is free. H preempts again (the other low job) instead of waiting behind
    a priority-0 job for ever."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        na, nb = SimNode(api, "na", slots=1), SimNode(api, "nb", slots=1, address="127.0.0.2")
        nodes = {"na": na, "nb": nb}
        na.register()
        nb.register()
        low = [api.submit({"command": ["w"], "name": "low%d" % i}) for i in (1, 2)]
        for j in low:
            api.wait_state(j["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        h = api.submit({"command": ["w"], "name": "h", "priority": 10, "grace_period_s": 1})
        victim = wait_for("h preempts a low job", lambda: next(
            (j for j in low if any("preempted for %s" % h["id"] in e["reason"]
                                   for e in api.events(j["id"]))), None), timeout=20)
        where = api.job(victim["id"])["nodes"][0]["name"]
        other = "na" if where == "nb" else "nb"
        x = api.submit({"command": ["w"], "name": "x", "priority": 20})
        # the victim's node reports its workers gone; x, the higher, takes it
        api.wait_state(x["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        assert api.job(x["id"])["nodes"][0]["name"] == where
        # h makes room again, on the other node (its low job is preempted in turn)
        j = api.wait_state(h["id"], "RUNNING", poke=lambda: beat_all([na, nb]), timeout=30)
        assert j["nodes"][0]["name"] == other, j
        assert nodes[other].assignment(h["id"]) is not None


def test_preemption_shrinks_a_real_job_and_it_grows_back():
    """Real agents and ddp-workers: a low-priority 1:3 job trains on 3 nodes; a high-priority
    2-node job arrives: the low one shrinks to 1 node (no restart charged) and trains on from
    its checkpoint, the high one runs, and when it ends the low one grows back and finishes.
    Prints the timeline (submit to shrunk, to resumed)."""
    import os
    import time
    from cluster import BIN
    worker = os.path.join(BIN, "ddp-worker")
    data = "synthetic:6000:784:10"
    with cluster(node_timeout=10) as c:
        for n in ("a", "b", "c"):
            c.start_agent(n, slots=1)
        c.wait_nodes_ready(["a", "b", "c"])
        low = c.submit({"name": "low", "nnodes": "1:3", "max_restarts": 0, "grace_period_s": 5,
                        "command": [worker, "--epochs", "8", "--data", data, "--timeout", "20"]})
        c.wait_state(low["id"], "RUNNING", timeout=60)

        def epoch_of(jid):
            ms = c.get("/v1/jobs/%s/metrics" % jid).json["metrics"]
            return max([m["metric"].get("epoch", 0) for m in ms] or [0])
        wait_for("low's epoch 1", lambda: epoch_of(low["id"]) >= 1, timeout=120)
        t0 = time.monotonic()
        high = c.submit({"name": "high", "nnodes": "2", "priority": 10, "grace_period_s": 5,
                         "command": [worker, "--epochs", "1", "--data", data, "--timeout", "20"]})
        j = wait_for("low shrunk to 1 node", lambda: (lambda j: j if j["generation"] == 2 and
                     j["state"] == "RUNNING" else None)(c.job(low["id"])), timeout=60)
        shrunk = time.monotonic() - t0
        assert len(j["nodes"]) == 1 and j["restarts"] == 0, j
        c.wait_state(high["id"], "RUNNING", timeout=30)
        ev = c.get("/v1/jobs/%s/events" % low["id"]).json["events"]
        assert any("preempted for %s (priority 10 > 0): shrinks" % high["id"] in e["reason"]
                   for e in ev), ev
        done = c.wait_state(high["id"], ("SUCCEEDED", "FAILED"), timeout=180)
        assert done["state"] == "SUCCEEDED", done
        j = wait_for("low grows back", lambda: (lambda j: j if len(j["nodes"]) >= 2 and
                     j["state"] == "RUNNING" or j["state"] in ("SUCCEEDED", "FAILED")
                     else None)(c.job(low["id"])), timeout=60)
        done = c.wait_state(low["id"], ("SUCCEEDED", "FAILED"), timeout=300)
        assert done["state"] == "SUCCEEDED" and done["restarts"] == 0, done
        logs = [ln["text"] for ln in c.get("/v1/jobs/%s/logs?rank=0&limit=10000" %
                                           low["id"]).json["lines"]]
        assert any("resuming after epoch" in t for t in logs), logs[-20:]
        print("preemption: submit of the high job to the low one running shrunk: %.1f s; the "
              "low job grew back to %d nodes and SUCCEEDED with 0 restarts" % (shrunk,
                                                                                len(j["nodes"])))


if __name__ == "__main__":
    run_tests(globals())
