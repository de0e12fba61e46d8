"""The series of a real ddpd's /metrics, scraped after real requests with simulated agents:
ddp_build_info, the per-job gauges of live jobs (state, generation, restarts, world size, and
loss, samples/s and epoch of the last metrics rank 0 reported), the per-node gauges (state,
slots, used slots, heartbeat age), request durations by route pattern and method with the
heartbeat long polls in their own histogram, the process and the store. The bound on
cardinality: a finished job's series and a removed node's are gone from the next scrape; no
route label is a raw path. promtool check metrics passes where promtool is installed."""
import os
import re
import shutil
import subprocess
import time

import api_sim
from api_sim import Api, SimNode, cluster, db_path, wait_assigned, wait_for
from test_api_nodes import parse_prometheus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB_FAMILIES = ("ddp_job_state", "ddp_job_generation", "ddp_job_restarts", "ddp_job_world_size",
                "ddp_job_loss", "ddp_job_samples_per_second", "ddp_job_epoch")
NODE_FAMILIES = ("ddp_node_state", "ddp_node_slots", "ddp_node_slots_used",
                 "ddp_node_heartbeat_age_seconds")
# The route patterns of server/http.c: what a route label may be.
ROUTES = {"/healthz", "/readyz", "/metrics", "/", "/ui/{file}", "/v1/openapi.json", "/v1/jobs",
          "/v1/jobs/{id}", "/v1/jobs/{id}:cancel", "/v1/jobs/{id}/events",
          "/v1/jobs/{id}/metrics", "/v1/jobs/{id}/logs", "/v1/jobs/{id}/logs:download",
          "/v1/nodes", "/v1/nodes:register", "/v1/nodes/{name}:heartbeat", "/v1/nodes/{name}",
          "/v1/nodes/{name}:cordon", "/v1/nodes/{name}:drain", "/v1/nodes/{name}:uncordon",
          "/v1/me", "/v1/users", "/v1/users/{name}", "/v1/users/{name}:rotate-token",
          "unmatched"}
BEAT = "/v1/nodes/{name}:heartbeat"


def project_version():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    m = re.search(r"project\(\s*ddp\s+VERSION\s+([0-9.]+)", text)
    assert m, "no project version in CMakeLists.txt"
    return m.group(1)


def scrape(api):
    a = api.get("/metrics", token=None)
    assert a.status == 200, a
    tool = shutil.which("promtool")
    if tool:
        p = subprocess.run([tool, "check", "metrics"], input=a.text.encode(),
                           capture_output=True, timeout=60)
        assert p.returncode == 0, "promtool check metrics: %s %s" % (p.stdout, p.stderr)
    return parse_prometheus(a.text)


def samples(fams, name, **labels):
    """[(labels, value)] of the family's samples named name whose labels include labels."""
    fam = re.sub(r"_(bucket|sum|count)$", "", name) if name not in fams else name
    assert fam in fams, "no family %s in /metrics" % fam
    assert fams[fam].get("help"), "family %s has no HELP" % fam
    return [(lb, v) for s, lb, v in fams[fam]["samples"]
            if s == name and all(lb.get(k) == x for k, x in labels.items())]


def one(fams, name, **labels):
    got = samples(fams, name, **labels)
    assert len(got) == 1, "%s%r: expected one sample, got %r" % (name, labels, got)
    return got[0][1]


def test_metrics_series():
    print("promtool: %s" % (shutil.which("promtool") or "not installed, own parser only"))
    with cluster(node_timeout=300) as c:
        api = Api(c)
        na = SimNode(api, "pm-a", slots=2)
        na.register()
        nb = SimNode(api, "pm-b", slots=3)
        nb.register()
        nb.beat()
        run = api.submit({"command": ["w"], "nproc_per_node": 2})
        wait_assigned(run["id"], [na])
        api.wait_state(run["id"], "RUNNING", poke=na.beat)
        na.pending_metrics = [{"job_id": run["id"], "generation": 1, "seq": 1,
                               "metric": {"epoch": 3, "loss": 0.41, "samples_per_s": 1250.5}}]
        na.beat()
        pend = api.submit({"command": ["w"], "nnodes": "4"})
        assert api.job(pend["id"])["state"] == "PENDING"
        api.get("/v1/jobs/" + run["id"])
        api.get("/v1/jobs/j-77")
        api.get("/v1/jobs/%s/events" % run["id"])
        # A long poll held for its wait_ms: nothing changes for pm-b.
        t0 = time.monotonic()
        nb.beat(version=nb.version, wait_ms=300)
        assert time.monotonic() - t0 >= 0.25, "the beat was not held"
        before = time.time()
        fams = scrape(api)

        info = samples(fams, "ddp_build_info")
        assert len(info) == 1 and info[0][1] == 1, info
        assert info[0][0]["version"] == project_version() and info[0][0]["commit"], info

        # Jobs: the running one with its last metrics, the pending one without.
        assert one(fams, "ddp_job_state", job_id=run["id"], owner="admin", state="RUNNING") == 1
        assert one(fams, "ddp_job_state", job_id=pend["id"], owner="admin", state="PENDING") == 1
        assert len(samples(fams, "ddp_job_state", job_id=run["id"])) == 1
        assert one(fams, "ddp_job_generation", job_id=run["id"]) == 1
        assert one(fams, "ddp_job_restarts", job_id=run["id"]) == 0
        assert one(fams, "ddp_job_world_size", job_id=run["id"]) == 2
        assert one(fams, "ddp_job_loss", job_id=run["id"]) == 0.41
        assert one(fams, "ddp_job_samples_per_second", job_id=run["id"]) == 1250.5
        assert one(fams, "ddp_job_epoch", job_id=run["id"]) == 3
        assert one(fams, "ddp_job_generation", job_id=pend["id"]) == 0
        assert samples(fams, "ddp_job_loss", job_id=pend["id"]) == [], "loss of a job never run"

        # Nodes.
        assert one(fams, "ddp_node_state", node="pm-a", state="READY") == 1
        assert len(samples(fams, "ddp_node_state", node="pm-a")) == 1
        assert one(fams, "ddp_node_slots", node="pm-a") == 2
        assert one(fams, "ddp_node_slots_used", node="pm-a") == 2
        assert one(fams, "ddp_node_slots", node="pm-b") == 3
        assert one(fams, "ddp_node_slots_used", node="pm-b") == 0
        age = one(fams, "ddp_node_heartbeat_age_seconds", node="pm-b")
        assert 0 <= age < 30, age

        # Requests: route labels are patterns; beats only in the long-poll histogram.
        for name in ("ddp_http_requests_total", "ddp_http_request_duration_seconds_count",
                     "ddp_http_long_poll_duration_seconds_count"):
            for lb, _ in samples(fams, name):
                assert lb["route"] in ROUTES, "%s: route label %r is not a pattern" % (
                    name, lb["route"])
        req = "ddp_http_request_duration_seconds_count"
        assert one(fams, req, route="/v1/jobs/{id}", method="GET") >= 2
        assert one(fams, req, route="/v1/jobs", method="POST") == 2
        assert one(fams, req, route="/v1/jobs/{id}/events", method="GET") == 1
        assert one(fams, req, route="/v1/nodes:register", method="POST") == 2
        assert samples(fams, req, route=BEAT) == [], "heartbeats spoil the request histogram"
        lp = "ddp_http_long_poll_duration_seconds"
        beats = one(fams, "ddp_heartbeats_total")
        assert one(fams, lp + "_count", route=BEAT, method="POST") == beats >= 3
        assert one(fams, lp + "_sum", route=BEAT, method="POST") >= 0.25
        assert one(fams, lp + "_bucket", route=BEAT, method="POST", le="0.1") < beats
        assert samples(fams, lp + "_count", route="/v1/jobs/{id}") == []

        # The process.
        assert one(fams, "ddp_process_open_fds") >= 3
        assert one(fams, "ddp_process_max_fds") >= one(fams, "ddp_process_open_fds")
        assert one(fams, "ddp_process_resident_memory_bytes") > 1 << 20
        assert one(fams, "ddp_process_cpu_seconds_total") >= 0
        start = one(fams, "ddp_process_start_time_seconds")
        assert before - 300 < start <= before + 1, (start, before)

        # The store.
        assert one(fams, "ddp_store_healthy") == 1
        assert one(fams, "ddp_store_write_failures_total") == 0
        commit = one(fams, "ddp_store_last_commit_timestamp_seconds")
        assert before - 60 < commit <= before + 1, (commit, before)
        assert samples(fams, "ddp_store_last_failure_timestamp_seconds") == []
        size = one(fams, "ddp_store_database_bytes")
        assert size >= os.path.getsize(db_path(c)) > 0, (size, os.path.getsize(db_path(c)))

        # Cardinality: finished jobs and a removed node leave no series.
        na.exit_workers(run["id"], 0)
        api.wait_state(run["id"], "SUCCEEDED", timeout=20, poke=na.beat)
        a = api.post("/v1/jobs/%s:cancel" % pend["id"])
        assert a.status == 200, a
        api.wait_state(pend["id"], "CANCELLED", timeout=20)
        a = api.request("DELETE", "/v1/nodes/pm-b")
        assert a.status == 200, a
        wait_for("slots of pm-a free", lambda: (na.beat() and
                                                api.nodes()["pm-a"]["slots_used"] == 0))
        fams = scrape(api)
        for fam in JOB_FAMILIES:
            assert fams[fam]["samples"] == [], "%s of finished jobs: %r" % (
                fam, fams[fam]["samples"])
        for fam in NODE_FAMILIES:
            assert samples(fams, fam, node="pm-b") == [], "%s of a removed node" % fam
        assert one(fams, "ddp_node_slots_used", node="pm-a") == 0
        assert one(fams, "ddp_jobs", state="SUCCEEDED") == 1
        assert one(fams, "ddp_jobs", state="CANCELLED") == 1
        # the raw path of a job never becomes a label
        a = api.get("/metrics", token=None)
        assert run["id"] not in a.text and pend["id"] not in a.text, "a job id left in /metrics"


def test_metrics_node_lost():
    """A silent node shows LOST, its heartbeat age past the timeout."""
    with cluster(node_timeout=1) as c:
        api = Api(c)
        n = SimNode(api, "pm-lost", slots=1)
        n.register()
        n.beat()
        wait_for("pm-lost LOST", lambda: api.nodes()["pm-lost"]["state"] == "LOST", timeout=20)
        fams = scrape(api)
        assert one(fams, "ddp_node_state", node="pm-lost", state="LOST") == 1
        assert len(samples(fams, "ddp_node_state", node="pm-lost")) == 1
        assert one(fams, "ddp_node_heartbeat_age_seconds", node="pm-lost") >= 1


if __name__ == "__main__":
    api_sim.run_tests(globals())
