"""Nodes and the agent protocol of a real ddpd, with simulated agents: register (idempotent for
the same incarnation, a new incarnation ends the generations on the node), GET /v1/nodes,
node timeout -> LOST and re-formation on fewer nodes (a restart), scale-up when a node joins
(not a restart), a LOST node beating again is READY, long poll (held until the desired set
changes, bounded by wait_ms, never held when the beat carried a change), /healthz and the
Prometheus /metrics checked strictly (and with promtool when installed)."""
import re
import shutil
import subprocess
import threading
import time

import api_sim
from api_sim import Api, SimNode, beat_all, cluster, wait_assigned, wait_for

NODE_TIMEOUT = 3


def test_nodes_register_list_incarnation():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "node-a", slots=3, address="127.0.0.5")
        a = n.register()
        assert a.json["heartbeat_interval_ms"] > 0, a
        node = a.json["node"]
        assert (node["name"], node["address"], node["slots"], node["slots_used"],
                node["port_range"]) == ("node-a", "127.0.0.5", 3, 0, n.ports), node
        n.beat()
        nodes = api.nodes()
        assert list(nodes) == ["node-a"] and nodes["node-a"]["state"] == "READY", nodes
        assert nodes["node-a"]["last_heartbeat"] is not None, nodes
        assert nodes["node-a"]["last_heartbeat_age_ms"] >= 0, nodes
        assert nodes["node-a"]["isolation"] is None, nodes  # the simulated agent did not say
        job = api.submit({"command": ["w"], "nproc_per_node": 3})
        x, = wait_assigned(job["id"], [n])
        assert x["owner"] == "admin", x  # whose local account a per-user agent runs it as
        api.wait_state(job["id"], "RUNNING", poke=n.beat)
        # Same incarnation (a lost answer): nothing changes.
        n.register()
        n.beat()
        assert n.assignment(job["id"]) == x and api.job(job["id"])["generation"] == 1
        # New incarnation: the agent restarted, its workers are gone; the generation ends.
        n.incarnation = "new-" + n.incarnation
        n.workers = {}
        n.register()
        x2, = wait_assigned(job["id"], [n], generation=2)
        j = api.wait_state(job["id"], "RUNNING", poke=n.beat)
        assert j["generation"] == 2, j
        ev = api.events(job["id"])
        assert any("node-a" in e["reason"] and "restart" in e["reason"] for e in ev), ev
        # The old incarnation beating now is refused with 409 ABORTED.
        a = api.post("/v1/nodes/node-a:heartbeat", {"incarnation": "stale-incarnation",
                                                    "version": 0}, token="node")
        assert a.status == 409 and a.json["error"]["status"] == "ABORTED", a


def test_nodes_isolation():
    """A register's optional "isolation" is kept and shown in the Node; another value is a 400
    naming the field, and a later register that does not say it clears it."""
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "node-i")
        body = {"name": "node-i", "address": "127.0.0.1", "slots": 1, "incarnation": "inc-1"}
        for bad in ("root", "", 1):
            a = api.post("/v1/nodes:register", dict(body, isolation=bad), token="agent")
            api_sim.expect_error(a, 400, "isolation")
        assert api.nodes() == {}
        for iso in ("per-user", "single-user"):
            cred = c.node_creds.get("node-i")
            reg = dict(body, isolation=iso, **({"credential": cred} if cred else {}))
            a = api.post("/v1/nodes:register", reg, token="agent")
            assert a.status == 200 and a.json["node"]["isolation"] == iso, a
            assert api.nodes()["node-i"]["isolation"] == iso
        n.incarnation = "inc-1"
        n.register()
        assert api.nodes()["node-i"]["isolation"] is None


def test_nodes_lost_reform_scale_up():
    with cluster(node_timeout=NODE_TIMEOUT) as c:
        api = Api(c)
        na = SimNode(api, "na", slots=1, address="127.0.0.1")
        nb = SimNode(api, "nb", slots=1, address="127.0.0.2")
        for n in (na, nb):
            n.register()
            n.beat()
        job = api.submit({"command": ["w"], "nnodes": "1:2", "max_restarts": 5})
        wait_assigned(job["id"], [na, nb])
        j = api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        assert j["world_size"] == 2 and j["generation"] == 1, j
        # nb falls silent: LOST after the timeout, the job re-forms on na alone.
        t0 = time.monotonic()
        wait_for("nb LOST", lambda: na.beat() and api.nodes()["nb"]["state"] == "LOST",
                 timeout=NODE_TIMEOUT + 30)
        assert time.monotonic() - t0 >= NODE_TIMEOUT * 0.5, "LOST before the node timeout"
        assert api.nodes()["na"]["state"] == "READY"
        x, = wait_assigned(job["id"], [na], generation=2, timeout=30)
        assert (x["group_rank"], x["group_world_size"], x["world_size"], x["master_addr"]) \
            == (0, 1, 1, "127.0.0.1"), x
        j = api.wait_state(job["id"], "RUNNING", poke=na.beat)
        # a lost node is no failure of the job's: no restart is charged
        assert (j["generation"], j["world_size"], j["restarts"]) == (2, 1, 0), j
        assert [n["name"] for n in j["nodes"]] == ["na"], j
        ev = api.events(job["id"])
        assert any("nb" in e["reason"] and "lost" in e["reason"].lower() for e in ev), ev
        # A new node joins: scale-up toward MAX at the next generation, not a restart.
        nc = SimNode(api, "nc", slots=1, address="127.0.0.3")
        nc.register()
        xs = wait_assigned(job["id"], [na, nc], generation=3, timeout=30)
        assert sorted(x["group_rank"] for x in xs) == [0, 1] and xs[0]["world_size"] == 2, xs
        j = api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all([na, nc]))
        assert (j["generation"], j["world_size"], j["restarts"]) == (3, 2, 0), j
        assert xs[0]["restart_count"] == 0, xs
        # The LOST node beats again with its incarnation: READY, and gets nothing (MAX is 2).
        nb.workers = {}
        nb.beat()
        wait_for("nb READY", lambda: beat_all([na, nb, nc]) or
                 api.nodes()["nb"]["state"] == "READY", timeout=20)
        assert nb.assignment(job["id"]) is None, nb.assignments


def test_nodes_elastic_edges():
    """MAX bounds the nodes taken; a duplicated exit beat (lost answer) is one restart; a job
    below MIN waits in RESTARTING and starts again when a node returns; cancel of a
    RESTARTING job."""
    with cluster(node_timeout=NODE_TIMEOUT) as c:
        api = Api(c)
        ns = [SimNode(api, "e%d" % i, slots=1) for i in range(3)]
        for n in ns:
            n.register()
            n.beat()
        job = api.submit({"command": ["w"], "nnodes": "1:2", "max_restarts": 5})
        wait_for("job on 2 nodes", lambda: beat_all(ns) or
                 sum(1 for n in ns if n.assignment(job["id"])) == 2, timeout=30)
        beat_all(ns)
        assert sum(1 for n in ns if n.assignment(job["id"])) == 2, "more than MAX nodes"
        j = api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all(ns))
        assert j["world_size"] == 2, j
        # A worker exits 1; the agent's beat is sent twice (the first answer was lost).
        member = next(n for n in ns if n.assignment(job["id"]))
        member.exit_workers(job["id"], 1)
        body = member.beat_body()
        for _ in range(2):
            a = api.post("/v1/nodes/%s:heartbeat" % member.name, body, token="node")
            assert a.status == 200, a
        member.reconcile(a.json)
        wait_for("generation 2", lambda: beat_all(ns) or
                 api.job(job["id"])["generation"] == 2, timeout=30)
        j = api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all(ns))
        assert (j["generation"], j["restarts"]) == (2, 1), j
        api.post("/v1/jobs/%s:cancel" % job["id"])
        api.wait_state(job["id"], "CANCELLED", poke=lambda: beat_all(ns))
        # MIN 3 of 3 nodes; one falls silent: RESTARTING, waiting for MIN.
        job = api.submit({"command": ["w"], "nnodes": "3", "max_restarts": 5})
        wait_assigned(job["id"], ns)
        api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all(ns))
        quiet, live = ns[2], ns[:2]
        wait_for("e2 LOST", lambda: beat_all(live) or api.nodes()["e2"]["state"] == "LOST",
                 timeout=NODE_TIMEOUT + 30)
        j = api.wait_state(job["id"], "RESTARTING", poke=lambda: beat_all(live))
        for _ in range(10):  # stays there while only 2 nodes are READY
            beat_all(live)
            assert api.job(job["id"])["state"] == "RESTARTING", api.job(job["id"])
            assert all(n.assignment(job["id"]) is None for n in live), "started below MIN"
            time.sleep(0.1)
        quiet.workers = {}
        xs = wait_assigned(job["id"], ns, generation=2, timeout=30)
        assert sorted(x["group_rank"] for x in xs) == [0, 1, 2], xs
        api.wait_state(job["id"], "RUNNING", poke=lambda: beat_all(ns))
        # Lose it again and cancel while RESTARTING.
        wait_for("e2 LOST again", lambda: beat_all(live) or
                 api.nodes()["e2"]["state"] == "LOST", timeout=NODE_TIMEOUT + 30)
        api.wait_state(job["id"], "RESTARTING", poke=lambda: beat_all(live))
        a = api.post("/v1/jobs/%s:cancel" % job["id"])
        assert a.status == 200 and a.json["state"] in ("CANCELLING", "CANCELLED"), a
        j = api.wait_state(job["id"], "CANCELLED", poke=lambda: beat_all(live))
        assert j["restarts"] == 0, j  # lost nodes are not the job's failures


def test_nodes_long_poll():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "lp", slots=2)
        n.register()
        n.beat()
        v0 = n.version
        # Nothing changes: held, bounded by wait_ms.
        t0 = time.monotonic()
        a = n.beat(wait_ms=800)
        held = time.monotonic() - t0
        assert a.json["version"] == v0 and a.json["assignments"] == [], a
        assert held >= 0.4, "long poll not held (%.3fs of 0.8s)" % held
        assert held < 0.8 + 10, "long poll held %.1fs for wait_ms 800" % held
        # wait_ms is capped at 2000.
        t0 = time.monotonic()
        a = n.beat(wait_ms=6000)
        held = time.monotonic() - t0
        assert a.json["version"] == v0 and 1.0 <= held < 8.0, \
            "wait_ms 6000 held %.2fs (cap 2 s)" % held
        # A version the agent does not have yet: answered at once with the current set.
        a = n.beat(version=v0 + 1000, wait_ms=2000)
        assert a.json["version"] == v0, a
        # Held while nothing changes, answered when a submit changes the desired set.
        box = {}

        def poll():
            t = time.monotonic()
            box["a"] = api.post("/v1/nodes/lp:heartbeat", n.beat_body(wait_ms=2000),
                                token="node")
            box["t"] = time.monotonic() - t
        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        job = api.submit({"command": ["w"], "nproc_per_node": 2})
        th.join(timeout=30)
        assert not th.is_alive(), "long poll never answered"
        a = box["a"]
        assert a.status == 200 and a.json["version"] != v0, a
        assert [x["job_id"] for x in a.json["assignments"]] == [job["id"]], \
            "the held beat was not answered with the new desired set: %r" % a
        n.reconcile(a.json)
        n.beat()
        api.wait_state(job["id"], "RUNNING", poke=n.beat)
        # A held beat is answered when a cancel takes the job out of the desired set.
        box.clear()
        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        other = api.submit({"command": ["w"], "nproc_per_node": 2, "nnodes": "2"})
        api.post("/v1/jobs/%s:cancel" % other["id"])
        th.join(timeout=30)
        assert not th.is_alive(), "long poll never answered"
        assert box["a"].status == 200, box["a"]
        # (the pending job never was in the set: the poll was still held, not woken by it)
        assert box["t"] >= 1.0, "held poll answered at %.2fs by a change not of this node" \
            % box["t"]
        cancel_job = api.submit({"command": ["w"], "nproc_per_node": 2})
        api.post("/v1/jobs/%s:cancel" % job["id"])
        n.beat()
        wait_assigned(cancel_job["id"], [n])
        box.clear()
        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        api.post("/v1/jobs/%s:cancel" % cancel_job["id"])
        th.join(timeout=30)
        assert not th.is_alive(), "long poll never answered"
        assert box["a"].status == 200 and box["a"].json["assignments"] == [], \
            "the held beat was not answered with the job cancelled: %r" % box["a"]
        n.reconcile(box["a"].json)
        api.wait_state(cancel_job["id"], "CANCELLED", poke=n.beat)
        job = api.submit({"command": ["w"], "nproc_per_node": 2})
        wait_assigned(job["id"], [n])
        api.wait_state(job["id"], "RUNNING", poke=n.beat)
        # A beat that carries a change ddpd has not acted on is never held: its answer
        # already reflects it.
        n.exit_workers(job["id"], 0)
        a = n.beat(wait_ms=2000)
        assert a.json["assignments"] == [], a
        assert api.job(job["id"])["state"] == "SUCCEEDED"


METRIC_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*")*,?)?\})? '
    r'([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))( -?[0-9]+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """Strict parse of the text exposition format 0.0.4; returns {family: {"type", "help",
    "samples": [(name, labels, value)]}} or raises AssertionError naming the line."""
    fams, cur = {}, None
    assert text.endswith("\n"), "exposition does not end with a newline"
    for i, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d %r" % (i, line[:120])
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert "help" not in fams.get(name, {}), "second HELP: " + where
            fams.setdefault(name, {"samples": []})["help"] = line.split(" ", 3)[3:]
        elif line.startswith("# TYPE "):
            parts = line.split(" ")
            assert len(parts) == 4, where
            name, typ = parts[2], parts[3]
            assert typ in ("counter", "gauge", "histogram", "summary", "untyped"), where
            f = fams.setdefault(name, {"samples": []})
            assert "type" not in f and not f["samples"], "TYPE after samples: " + where
            f["type"] = typ
            cur = name
        elif line.startswith("#") or line == "":
            assert line == "" or line.startswith("# "), where
        else:
            m = METRIC_LINE.match(line)
            assert m, "bad sample: " + where
            name = m.group(1)
            fam = name
            for suf in ("_bucket", "_sum", "_count", "_total", "_created"):
                if name.endswith(suf) and name[:-len(suf)] in fams:
                    fam = name[:-len(suf)]
            assert fam in fams and "type" in fams[fam], "sample without TYPE: " + where
            assert fam == cur, "samples of %s not grouped: %s" % (fam, where)
            labels = dict(LABEL.findall(m.group(2) or ""))
            fams[fam]["samples"].append((name, labels, float(m.group(3))))
    for name, f in fams.items():
        if f.get("type") == "histogram":
            series = {}
            for s, labels, v in f["samples"]:
                key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
                series.setdefault(key, {"b": [], "sum": None, "count": None})
                if s == name + "_bucket":
                    series[key]["b"].append((labels["le"], v))
                elif s == name + "_sum":
                    series[key]["sum"] = v
                elif s == name + "_count":
                    series[key]["count"] = v
            for key, sr in series.items():
                assert sr["b"] and sr["b"][-1][0] == "+Inf", "%s%s: no +Inf bucket" % (
                    name, key)
                vals = [v for _, v in sr["b"]]
                assert vals == sorted(vals), "%s buckets not cumulative" % name
                les = [float(le) for le, _ in sr["b"]]
                assert les == sorted(les), "%s le not increasing" % name
                assert sr["count"] == vals[-1] and sr["sum"] is not None, \
                    "%s: _count != +Inf bucket or no _sum" % name
    return fams


def test_nodes_healthz_and_prometheus_metrics():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        a = api.get("/healthz", token=None)
        assert a.status == 200, a
        n = SimNode(api, "pm", slots=1)
        n.register()
        for _ in range(3):
            n.beat()
        api.submit({"command": ["w"], "nnodes": "4"})
        api.get("/v1/jobs/j-77")
        a = api.get("/metrics", token=None)
        assert a.status == 200, a
        ctype = next(v for k, v in a.headers.items() if k.lower() == "content-type")
        assert ctype.startswith("text/plain"), ctype
        fams = parse_prometheus(a.text)
        samples = [s for f in fams.values() for s in f["samples"]]

        def by_state(states):
            """{state: value} of the family whose state label covers states, or None."""
            for f in fams.values():
                got = {s[1]["state"]: s[2] for s in f["samples"] if "state" in s[1]}
                if set(states) <= set(got):
                    return got
            return None
        jobs = by_state(("PENDING", "RUNNING", "RESTARTING", "SUCCEEDED", "FAILED",
                         "CANCELLING", "CANCELLED"))
        assert jobs and jobs["PENDING"] == 1 and sum(jobs.values()) == 1, \
            "no jobs-by-state family with the one PENDING job: %r" % jobs
        nodes = by_state(("READY", "LOST"))
        assert nodes == {"READY": 1, "LOST": 0}, "nodes by state: %r" % nodes
        codes = [s for s in samples if "code" in s[1]]
        assert any(s[1]["code"] == "404" for s in codes) and \
            any(s[1]["code"] == "201" for s in codes), "no HTTP requests by code (201, 404)"
        assert any(len(s[1]) >= 2 for s in codes), "requests not labelled by route"
        assert any(f.get("type") == "histogram" for f in fams.values()), "no histogram"
        beats = [s for s in samples if "heartbeat" in s[0]]
        assert beats and max(v for _, _, v in beats) >= 3, "heartbeats received not counted"
        tool = shutil.which("promtool")
        if tool:
            p = subprocess.run([tool, "check", "metrics"], input=a.text.encode(),
                               capture_output=True, timeout=60)
            assert p.returncode == 0, "promtool: %s %s" % (p.stdout, p.stderr)


def test_nodes_prometheus_parser_strict():
    good = ('# HELP a_total Requests.\n# TYPE a_total counter\n'
            'a_total{route="/v1/jobs",code="200"} 3\n# TYPE h histogram\n'
            'h_bucket{le="0.1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 0.3\nh_count 2\n')
    fams = parse_prometheus(good)
    assert fams["a_total"]["samples"] == [("a_total", {"route": "/v1/jobs", "code": "200"},
                                           3.0)], fams
    for bad in ("x 1\n", "# TYPE a gauge\na{b=c} 1\n", "# TYPE a gauge\na 1",
                "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n"):
        try:
            parse_prometheus(bad)
        except AssertionError:
            continue
        raise AssertionError("parser accepted %r" % bad)


if __name__ == "__main__":
    api_sim.run_tests(globals())
