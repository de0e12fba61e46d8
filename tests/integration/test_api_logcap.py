"""The per-job caps of a real ddpd. Logs: of a real ddpd: past 100000 lines the oldest are dropped first and
GET /v1/jobs/{id}/logs says how many (`dropped`); the newest lines are all kept, in order.
Sends 100 beats of 1000 lines (the agent's per-beat maximum) plus one of 500. Metrics: past
10000 per job the oldest are dropped; events are never dropped."""
import api_sim
from api_sim import Api, SimNode, cluster, wait_assigned

CAP = 100000
EXTRA = 500
PER_BEAT = 1000


def test_logcap_oldest_dropped_and_counted():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "logs", slots=1)
        n.register()
        job = api.submit({"command": ["w"]})
        wait_assigned(job["id"], [n])
        total = CAP + EXTRA
        seq = 1
        while seq <= total:
            k = min(PER_BEAT, total - seq + 1)
            n.pending_logs = [{"job_id": job["id"], "generation": 1, "rank": 0, "seq": seq,
                               "lines": ["l%d" % i for i in range(seq, seq + k)]}]
            n.beat()
            seq += k
        base = "/v1/jobs/%s/logs" % job["id"]
        a = api.get(base + "?limit=5")
        assert a.status == 200, a
        assert a.json["dropped"] == EXTRA, "dropped %r, expected %d" % (a.json["dropped"],
                                                                        EXTRA)
        assert [ln["text"] for ln in a.json["lines"]] == \
            ["l%d" % i for i in range(EXTRA + 1, EXTRA + 6)], a.json["lines"]
        # The newest lines are there, up to the last one.
        got, after = [], a.json["lines"][0]["seq"] - 1
        for _ in range(200):
            a = api.get(base + "?limit=1000&after=%d" % after, check=False)
            assert a.status == 200, a
            if not a.json["lines"]:
                break
            got += [ln["text"] for ln in a.json["lines"]]
            after = a.json["next"]
        assert len(got) == CAP and got[0] == "l%d" % (EXTRA + 1) and got[-1] == "l%d" % total, \
            (len(got), got[:1], got[-1:])


def test_logcap_metrics_capped_events_kept():
    cap, extra = 10000, 500
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "mets", slots=1)
        n.register()
        job = api.submit({"command": ["w"]})
        wait_assigned(job["id"], [n])
        seq = 1
        while seq <= cap + extra:
            k = min(1000, cap + extra - seq + 1)
            n.pending_metrics = [{"job_id": job["id"], "generation": 1, "seq": i,
                                  "metric": {"step": i}} for i in range(seq, seq + k)]
            n.beat()
            seq += k
        a = api.get("/v1/jobs/%s/metrics" % job["id"])
        assert a.status == 200, a
        steps = [m["metric"]["step"] for m in a.json["metrics"]]
        assert steps == list(range(extra + 1, cap + extra + 1)), (len(steps), steps[:3],
                                                                 steps[-3:])
        assert api.job(job["id"])["last_metrics"] == {"step": cap + extra}
        n.exit_workers(job["id"], 0)
        api.wait_state(job["id"], "SUCCEEDED", poke=n.beat)
        ev = api.events(job["id"])
        assert [e["seq"] for e in ev] == list(range(1, len(ev) + 1)), ev
        assert [e["state"] for e in ev] == ["PENDING", "RUNNING", "SUCCEEDED"], ev


if __name__ == "__main__":
    api_sim.run_tests(globals())
