"""The per-job log cap of a real ddpd: past 100000 lines the oldest are dropped first and
GET /v1/jobs/{id}/logs says how many (`dropped`); the newest lines are all kept, in order.
Sends 100 beats of 1000 lines (the agent's per-beat maximum) plus one of 500."""
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


if __name__ == "__main__":
    api_sim.run_tests(globals())
