"""Jobs API of a real ddpd, with simulated agents: submit (201, defaults filled in, durable
before the answer), get, list (newest first, state filter, pagination), cancel (idempotent),
gang start with ranks / MASTER_ADDR / MASTER_PORT / world size, logs (rank filter, after,
limit, duplicate beats), metrics, events, worker exits driving SUCCEEDED, RESTARTING and
FAILED (max_restarts), max_runtime_s, FIFO and port allocation. Every answer is checked
against schema/openapi.json by api_sim.Api."""
import sqlite3

import api_sim
from api_sim import Api, SimNode, beat_all, cluster, db_path, wait_assigned, wait_for

DEFAULTS = {"name": "job", "env": {}, "nproc_per_node": 1, "max_restarts": 3,
            "max_runtime_s": 0, "grace_period_s": 30, "hang_timeout_s": 0, "workdir": "",
            "checkpoint_dir": "", "priority": 0, "node_selector": {}}


def jid(n):
    return int(n["id"][2:])


def test_jobs_submit_get_list_cancel():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        j1 = api.submit({"command": ["true"]})
        assert j1["id"] == "j-1", j1
        for k, v in DEFAULTS.items():
            assert j1["spec"][k] == v, "default %s: %r != %r" % (k, j1["spec"][k], v)
        assert j1["spec"]["nnodes"] in ("1", "1:1", 1), j1["spec"]["nnodes"]
        assert j1["spec"]["command"] == ["true"]
        assert (j1["state"], j1["generation"], j1["restarts"], j1["nodes"],
                j1["last_metrics"], j1["started_at"], j1["finished_at"]) == \
            ("PENDING", 0, 0, [], None, None, None), j1
        assert j1["name"] == "job"
        full = {"command": ["ddp-worker", "--epochs", "3"], "name": "durable-probe.7",
                "env": {"A_1": "x=y", "B": ""}, "nnodes": "2:4", "nproc_per_node": 3,
                "max_restarts": 0, "max_runtime_s": 600, "grace_period_s": 5,
                "hang_timeout_s": 60, "workdir": "/tmp", "checkpoint_dir": "/tmp/ck"}
        j2 = api.submit(full)
        # Durable before the answer: another connection sees it in the file right now.
        con = sqlite3.connect("file:%s?mode=ro" % db_path(c), uri=True, timeout=10)
        try:
            found = False
            for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                for row in con.execute('SELECT * FROM "%s"' % t):
                    if any(isinstance(x, str) and "durable-probe.7" in x for x in row):
                        found = True
            assert found, "the acknowledged job is not in the database file"
        finally:
            con.close()
        assert j2["id"] == "j-2" and j2["name"] == "durable-probe.7", j2
        for k, v in full.items():
            if k != "nnodes":
                assert j2["spec"][k] == v, (k, j2["spec"][k], v)
        assert j2["spec"]["nnodes"] == "2:4", j2["spec"]["nnodes"]
        assert api.submit({"command": ["x"], "nnodes": 3})["spec"]["nnodes"] in ("3", "3:3")
        g = api.job("j-2")
        assert g["spec"] == j2["spec"] and g["state"] == "PENDING" and \
            g["created_at"] == j2["created_at"], (g, j2)
        for _ in range(4):
            api.submit({"command": ["true"], "nnodes": "2"})
        # j-1..j-7; list newest first.
        all_jobs = api.all_jobs()
        assert [j["id"] for j in all_jobs] == ["j-%d" % i for i in range(7, 0, -1)], \
            [j["id"] for j in all_jobs]
        pages, token = [], ""
        for _ in range(10):
            a = api.get("/v1/jobs?page_size=3" + ("&page_token=" + token if token else ""))
            assert a.status == 200, a
            pages.append([j["id"] for j in a.json["jobs"]])
            token = a.json["next_page_token"]
            if not token:
                break
        assert [len(p) for p in pages] in ([3, 3, 1], [3, 3, 1, 0]), pages
        assert sum(pages, []) == [j["id"] for j in all_jobs], pages
        # Cancel a PENDING job: CANCELLED (maybe through CANCELLING), idempotent.
        a = api.post("/v1/jobs/j-3:cancel")
        assert a.status == 200 and a.json["state"] in ("CANCELLING", "CANCELLED"), a
        done = api.wait_state("j-3", "CANCELLED", timeout=20)
        assert done["finished_at"], done
        a = api.post("/v1/jobs/j-3:cancel")
        assert a.status == 200 and a.json == api.job("j-3"), a
        assert a.json["finished_at"] == done["finished_at"], a
        api.post("/v1/jobs/j-5:cancel")
        api.wait_state("j-5", "CANCELLED", timeout=20)
        assert [j["id"] for j in api.all_jobs("CANCELLED")] == ["j-5", "j-3"]
        assert [j["id"] for j in api.all_jobs("PENDING", page_size=2)] == \
            ["j-7", "j-6", "j-4", "j-2", "j-1"]
        assert api.all_jobs("RUNNING") == []
        ev = api.events("j-3")
        assert [e["seq"] for e in ev] == sorted(e["seq"] for e in ev), ev
        assert ev and ev[-1]["state"] == "CANCELLED" and ev[-1]["reason"], ev
        assert all(e["reason"] for e in ev), ev
        assert api.events("j-3", after=ev[-1]["seq"]) == []
        assert api.events("j-3", after=ev[0]["seq"]) == ev[1:]


def test_jobs_gang_start_logs_metrics_success():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        na = SimNode(api, "node-a", slots=2, address="127.0.0.1")
        nb = SimNode(api, "node-b", slots=2, address="127.0.0.2")
        for n in (na, nb):
            n.register()
            n.beat()
        spec = {"command": ["ddp-worker", "--epochs", "2"], "env": {"K": "V"}, "nnodes": "2",
                "nproc_per_node": 2, "max_restarts": 2, "grace_period_s": 7}
        job = api.submit(spec)
        xs = wait_assigned(job["id"], [na, nb])
        by_gr = sorted(zip(xs, (na, nb)), key=lambda p: p[0]["group_rank"])
        assert [x["group_rank"] for x, _ in by_gr] == [0, 1], xs
        master = by_gr[0][1]
        lo, hi = map(int, master.ports.split("-"))
        tokens = {x["job_token"] for x in xs}
        assert len(tokens) == 1 and all(tokens), tokens
        for x in xs:
            assert (x["generation"], x["group_world_size"], x["world_size"],
                    x["nproc_per_node"], x["restart_count"], x["max_restarts"],
                    x["grace_period_s"]) == (1, 2, 4, 2, 0, 2, 7), x
            assert x["command"] == spec["command"] and x["env"] == {"K": "V"}, x
            assert x["master_addr"] == master.address, (x, master.address)
            assert lo <= x["master_port"] <= hi, (x["master_port"], master.ports)
            assert x["master_port"] == xs[0]["master_port"] and x["run_id"], x
        j = api.wait_state(job["id"], "RUNNING", timeout=20, poke=lambda: beat_all([na, nb]))
        assert (j["generation"], j["world_size"], j["master_addr"], j["master_port"]) == \
            (1, 4, master.address, xs[0]["master_port"]), j
        assert j["started_at"] and j["finished_at"] is None, j
        assert sorted((n["group_rank"], n["name"], n["ranks"]) for n in j["nodes"]) == \
            [(x["group_rank"], n.name, [2 * x["group_rank"], 2 * x["group_rank"] + 1])
             for x, n in by_gr], j["nodes"]
        nodes = api.nodes()
        assert nodes["node-a"]["slots_used"] == 2 and nodes["node-b"]["slots_used"] == 2, nodes
        # Logs and metrics; a duplicated beat stores nothing twice.
        r0 = by_gr[0][1]
        r1 = by_gr[1][1]
        logs0 = [{"job_id": job["id"], "generation": 1, "rank": 0, "seq": 1,
                  "lines": ["a0", "a1", "a2"]},
                 {"job_id": job["id"], "generation": 1, "rank": 1, "seq": 1,
                  "lines": ["b0", "x" * 5000]}]
        logs1 = [{"job_id": job["id"], "generation": 1, "rank": 2, "seq": 1,
                  "lines": ["c0", "c1"]}]
        mets = [{"job_id": job["id"], "generation": 1, "seq": 1, "metric": {"epoch": 1,
                                                                            "loss": 0.5}},
                {"job_id": job["id"], "generation": 1, "seq": 2, "metric": {"epoch": 2,
                                                                            "loss": 0.25}}]
        for _ in range(2):
            r0.pending_logs, r0.pending_metrics = list(logs0), list(mets)
            r0.beat()
            r1.pending_logs = list(logs1)
            r1.beat()
        # An overlapping batch: seq 3 repeats a2 (ignored), seq 4 (a3) is new.
        r0.pending_logs = [{"job_id": job["id"], "generation": 1, "rank": 0, "seq": 3,
                            "lines": ["a2", "a3"]}]
        r0.beat()
        base = "/v1/jobs/%s/logs" % job["id"]
        a = api.get(base)
        assert a.status == 200, a
        lines = a.json["lines"]
        assert a.json["dropped"] == 0, a.json
        seqs = [ln["seq"] for ln in lines]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
        per = {}
        for ln in lines:
            assert ln["generation"] == 1, ln
            per.setdefault(ln["rank"], []).append(ln["text"])
        assert per.get(0) == ["a0", "a1", "a2", "a3"], per
        assert per.get(2) == ["c0", "c1"], per
        assert per.get(1, [None])[0] == "b0" and len(per[1]) == 2, per
        assert 0 < len(per[1][1].encode()) <= 4096 and per[1][1] == "x" * len(per[1][1]), \
            len(per[1][1])
        assert a.json["next"] == seqs[-1], a.json["next"]
        a = api.get(base + "?rank=2")
        assert [ln["text"] for ln in a.json["lines"]] == ["c0", "c1"], a
        assert all(ln["rank"] == 2 for ln in a.json["lines"])
        a = api.get(base + "?after=%d" % seqs[-1])
        assert a.json["lines"] == [] and a.json["next"] == seqs[-1], a
        got, after = [], 0
        for _ in range(10):
            a = api.get(base + "?limit=3&after=%d" % after)
            assert len(a.json["lines"]) <= 3, a
            if not a.json["lines"]:
                break
            got += a.json["lines"]
            after = a.json["next"]
        assert got == lines, (got, lines)
        a = api.get("/v1/jobs/%s/metrics" % job["id"])
        assert [(m["seq"], m["generation"], m["metric"]) for m in a.json["metrics"]] == \
            [(1, 1, {"epoch": 1, "loss": 0.5}), (2, 1, {"epoch": 2, "loss": 0.25})], a
        a = api.get("/v1/jobs/%s/metrics?after=1" % job["id"])
        assert [m["seq"] for m in a.json["metrics"]] == [2], a
        assert api.job(job["id"])["last_metrics"] == {"epoch": 2, "loss": 0.25}
        # Every worker exits 0: SUCCEEDED, the desired sets empty, the slots free.
        for n in (na, nb):
            n.exit_workers(job["id"], 0)
        j = api.wait_state(job["id"], "SUCCEEDED", timeout=20, poke=lambda: beat_all([na, nb]))
        assert j["finished_at"] and j["generation"] == 1 and j["restarts"] == 0, j
        wait_for("desired sets empty", lambda: (beat_all([na, nb]) or
                                                 (not na.assignments and not nb.assignments)),
                 timeout=20)
        nodes = api.nodes()
        assert nodes["node-a"]["slots_used"] == 0 and nodes["node-b"]["slots_used"] == 0, nodes
        states = [e["state"] for e in api.events(job["id"])]
        assert "RUNNING" in states and states[-1] == "SUCCEEDED", states
        a = api.post("/v1/jobs/%s:cancel" % job["id"])
        assert a.status == 200 and a.json == j, (a, j)


def test_jobs_exit_restart_and_fail():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "solo", slots=2)
        n.register()
        job = api.submit({"command": ["w"], "nproc_per_node": 2, "max_restarts": 1})
        x = wait_assigned(job["id"], [n])[0]
        assert x["generation"] == 1 and x["restart_count"] == 0, x
        token1 = x["job_token"]
        api.wait_state(job["id"], "RUNNING", poke=n.beat)
        n.exit_workers(job["id"], 1, ranks=[1])
        x = wait_assigned(job["id"], [n], generation=2)[0]
        assert x["restart_count"] == 1 and x["max_restarts"] == 1, x
        # each generation its own token (256 bits): a worker left of generation 1 cannot
        # join generation 2's store
        assert all(len(t) == 64 and int(t, 16) >= 0 for t in (token1, x["job_token"])), x
        assert x["job_token"] != token1
        j = api.wait_state(job["id"], "RUNNING", poke=n.beat)
        assert j["generation"] == 2 and j["restarts"] == 1, j
        ev = api.events(job["id"])
        assert any(e["state"] == "RESTARTING" and "rank 1" in e["reason"] and
                   "exited 1" in e["reason"] for e in ev), ev
        # Budget spent: the next failure is final.
        n.exit_workers(job["id"], 3, ranks=[0])
        j = api.wait_state(job["id"], "FAILED", poke=n.beat)
        assert j["restarts"] == 1 and j["finished_at"] and "rank 0" in j["reason"], j
        wait_for("desired set empty", lambda: n.beat() and not n.assignments, timeout=20)
        # max_restarts 0: the first non-zero exit (here a signal) fails the job.
        job = api.submit({"command": ["w"], "max_restarts": 0})
        wait_assigned(job["id"], [n])
        n.exit_workers(job["id"], -1, signal=9)
        j = api.wait_state(job["id"], "FAILED", poke=n.beat)
        assert j["generation"] == 1 and j["restarts"] == 0, j


def test_jobs_cancel_running_runtime_fifo_ports():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "box", slots=2)
        n.register()
        j1 = api.submit({"command": ["w"], "name": "first"})
        j2 = api.submit({"command": ["w"], "name": "second"})
        j3 = api.submit({"command": ["w"], "name": "third"})
        x1, = wait_assigned(j1["id"], [n])
        x2, = wait_assigned(j2["id"], [n])
        assert x1["master_port"] != x2["master_port"], (x1, x2)
        lo, hi = map(int, n.ports.split("-"))
        assert lo <= x1["master_port"] <= hi and lo <= x2["master_port"] <= hi
        n.beat()
        assert n.assignment(j3["id"]) is None, "third job started without free slots"
        assert api.job(j3["id"])["state"] == "PENDING"
        # Cancel the running first job: it leaves the desired set, then CANCELLED.
        a = api.post("/v1/jobs/%s:cancel" % j1["id"])
        assert a.status == 200 and a.json["state"] in ("CANCELLING", "CANCELLED"), a
        n.beat()
        assert n.assignment(j1["id"]) is None, n.assignments
        j = api.wait_state(j1["id"], "CANCELLED", poke=n.beat)
        a = api.post("/v1/jobs/%s:cancel" % j1["id"])
        assert a.status == 200 and a.json == j, a
        # FIFO: the third job takes the freed slot, on a port not used by the second.
        x3, = wait_assigned(j3["id"], [n])
        assert x3["master_port"] != x2["master_port"], (x2, x3)
        # max_runtime_s: the second job is stopped and FAILED once its time is up.
        j4 = api.submit({"command": ["w"], "max_runtime_s": 1, "nproc_per_node": 2})
        n.exit_workers(j2["id"], 0)
        n.exit_workers(j3["id"], 0)
        api.wait_state(j2["id"], "SUCCEEDED", poke=n.beat)
        api.wait_state(j3["id"], "SUCCEEDED", poke=n.beat)
        wait_assigned(j4["id"], [n])
        j = api.wait_state(j4["id"], ("FAILED", "CANCELLED"), timeout=30, poke=n.beat)
        assert j["state"] == "FAILED" and "runtime" in (j["reason"] or ""), j


def test_jobs_hang_timeout_from_progress():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "hang", slots=1)
        n.register()
        job = api.submit({"command": ["w"], "hang_timeout_s": 2, "max_restarts": 0})
        wait_assigned(job["id"], [n])
        api.wait_state(job["id"], "RUNNING", poke=n.beat)
        # Fresh progress: nothing happens.
        n.progress = [{"job_id": job["id"], "generation": 1, "rank": 0, "age_ms": 100}]
        for _ in range(3):
            n.beat()
        assert api.job(job["id"])["state"] == "RUNNING"
        # No progress for longer than hang_timeout_s: the generation fails (no restarts left).
        n.progress[0]["age_ms"] = 5000
        j = api.wait_state(job["id"], "FAILED", timeout=30, poke=n.beat)
        assert "hang" in j["reason"] or "progress" in j["reason"], j


def test_jobs_rank_order_deterministic():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        ns = [SimNode(api, name, slots=1) for name in ("n-c", "n-a", "n-b")]
        for n in ns:
            n.register()
        orders = []
        for _ in range(2):
            job = api.submit({"command": ["w"], "nnodes": "3"})
            xs = wait_assigned(job["id"], ns)
            orders.append([x["group_rank"] for x in xs])
            assert sorted(orders[-1]) == [0, 1, 2], orders
            assert all(x["master_addr"] == "127.0.0.1" for x in xs)
            for n in ns:
                n.exit_workers(job["id"], 0)
            api.wait_state(job["id"], "SUCCEEDED", poke=lambda: beat_all(ns))
        assert orders[0] == orders[1], "same nodes, different node ranks: %s" % orders


def test_jobs_text_round_trip():
    """Names, env, command and log lines with quotes, backslashes, tabs and non-ASCII text come
    back exactly as sent."""
    odd = 'h\u00e9llo \u2713 "quoted" \\ back\tslash \u65e5\u672c'
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "utf", slots=1)
        n.register()
        spec = {"command": ["echo", odd, "--x=" + odd], "env": {"ODD": odd, "E": ""}}
        job = api.submit(spec)
        x, = wait_assigned(job["id"], [n])
        assert x["command"] == spec["command"] and x["env"] == spec["env"], x
        assert api.job(job["id"])["spec"]["env"] == spec["env"]
        n.pending_logs = [{"job_id": job["id"], "generation": 1, "rank": 0, "seq": 1,
                           "lines": [odd, "", " lead and trail "]}]
        n.pending_metrics = [{"job_id": job["id"], "generation": 1, "seq": 1,
                              "metric": {"note": odd, "nested": {"a": [1, 2.5, None, True]}}}]
        n.beat()
        a = api.get("/v1/jobs/%s/logs" % job["id"])
        assert [ln["text"] for ln in a.json["lines"]] == [odd, "", " lead and trail "], a
        m = api.get("/v1/jobs/%s/metrics" % job["id"]).json["metrics"]
        assert m[0]["metric"] == {"note": odd, "nested": {"a": [1, 2.5, None, True]}}, m


if __name__ == "__main__":
    api_sim.run_tests(globals())
