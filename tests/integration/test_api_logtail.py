"""GET /v1/jobs/{id}/logs?tail=N of a real ddpd: the last N lines (of one rank or of all), in
seq order, `next` usable for following on with `after`; every bad tail refused with its own
message. One node runs ranks 0 and 1 of a job; 12 beats ship 12000 lines (rank 0: 9000,
rank 1: 3000), more than the largest tail (10000)."""
import api_sim
from api_sim import Api, SimNode, cluster, expect_error, wait_assigned

BEATS = 12
R0_PER_BEAT = 750
R1_PER_BEAT = 250
RANGE_MSG = "field 'tail': expected an integer in [1, 10000]"


def ship(n, job_id, rank, first, texts):
    n.pending_logs.append({"job_id": job_id, "generation": 1, "rank": rank, "seq": first,
                           "lines": list(texts)})


def all_lines(api, base):
    """Every line, paged from the start with after/limit (the reference the tails must
    match)."""
    got, after = [], 0
    for _ in range(100):
        a = api.get(base + "?limit=10000&after=%d" % after)
        assert a.status == 200, a
        if not a.json["lines"]:
            return got
        got += a.json["lines"]
        after = a.json["next"]
    raise AssertionError("paging did not end")


def test_logtail():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        n = SimNode(api, "tail", slots=2)
        n.register()
        job = api.submit({"command": ["w"], "nproc_per_node": 2})
        jid = job["id"]
        wait_assigned(jid, [n])
        base = "/v1/jobs/%s/logs" % jid

        # Before any line: an empty tail, next 0 (following from there reads every line).
        a = api.get(base + "?tail=5")
        assert a.status == 200 and a.json == {"lines": [], "next": 0, "dropped": 0}, a

        s0 = s1 = 1
        for b in range(BEATS):
            ship(n, jid, 0, s0, ("r0 %d" % i for i in range(s0, s0 + R0_PER_BEAT)))
            ship(n, jid, 1, s1, ("r1 %d" % i for i in range(s1, s1 + R1_PER_BEAT)))
            s0 += R0_PER_BEAT
            s1 += R1_PER_BEAT
            n.beat()
        ref = all_lines(api, base)
        total = BEATS * (R0_PER_BEAT + R1_PER_BEAT)
        assert len(ref) == total, len(ref)
        ref0 = [ln for ln in ref if ln["rank"] == 0]
        ref1 = [ln for ln in ref if ln["rank"] == 1]

        # A log larger than N: exactly its last N lines, in seq order; next = the last seq.
        for tail in (1, 5, 1000, 10000):
            a = api.get(base + "?tail=%d" % tail)
            assert a.status == 200, a
            assert a.json["lines"] == ref[-tail:], (tail, a.json["lines"][:2], ref[-tail:][:2])
            assert a.json["next"] == ref[-1]["seq"] and a.json["dropped"] == 0, a.json["next"]
        # With rank: the rank's last N lines, even when the other rank wrote after them.
        a = api.get(base + "?rank=0&tail=100")
        assert a.json["lines"] == ref0[-100:], a.json["lines"][:2]
        assert [ln["text"] for ln in a.json["lines"][-2:]] == ["r0 8999", "r0 9000"], a
        a = api.get(base + "?tail=7&rank=1")
        assert a.json["lines"] == ref1[-7:] and a.json["next"] == ref1[-1]["seq"], a
        # A tail bigger than the log (of the rank): the whole log.
        a = api.get(base + "?rank=1&tail=10000")
        assert a.json["lines"] == ref1 and len(ref1) == BEATS * R1_PER_BEAT, len(a.json["lines"])
        # A rank with no line: empty, next 0.
        a = api.get(base + "?rank=5&tail=10")
        assert a.json == {"lines": [], "next": 0, "dropped": 0}, a

        # Bad values, each with its message (and the database unchanged by them).
        for q in ("tail=0", "tail=-1", "tail=10001", "tail=x", "tail=", "tail=1.5",
                  "rank=0&tail=0"):
            a = api.get(base + "?" + q)
            expect_error(a, 400, "tail", q)
            assert a.json["error"]["message"] == RANGE_MSG, (q, a.json)
        for q, other in (("tail=5&after=0", "after"), ("after=10&tail=5", "after"),
                         ("tail=5&limit=10", "limit"), ("rank=1&tail=5&after=3", "after")):
            a = api.get(base + "?" + q)
            expect_error(a, 400, "tail", q)
            msg = a.json["error"]["message"]
            assert msg.startswith("field 'tail': cannot be combined with '%s'" % other), (q, msg)
        expect_error(api.get("/v1/jobs/j-999/logs?tail=5"), 404, "j-999")

        # Follow after the tail: new lines of both ranks arrive once, in order.
        a = api.get(base + "?tail=3")
        nxt = a.json["next"]
        ship(n, jid, 1, s1, ["r1 new a", "r1 new b"])
        ship(n, jid, 0, s0, ["r0 new"])
        n.beat()
        a = api.get(base + "?after=%d" % nxt)
        assert [ln["text"] for ln in a.json["lines"]] == ["r1 new a", "r1 new b", "r0 new"], a
        assert a.json["lines"][0]["seq"] == nxt + 1, (nxt, a.json["lines"][0])
        a = api.get(base + "?after=%d" % a.json["next"])
        assert a.json["lines"] == [], a
        # ... and for one rank: the rank's tail, then only its new lines.
        a = api.get(base + "?rank=0&tail=2")
        assert [ln["text"] for ln in a.json["lines"]] == ["r0 9000", "r0 new"], a
        nxt = a.json["next"]
        ship(n, jid, 1, s1 + 2, ["r1 later"])
        ship(n, jid, 0, s0 + 1, ["r0 later"])
        n.beat()
        a = api.get(base + "?rank=0&after=%d" % nxt)
        assert [ln["text"] for ln in a.json["lines"]] == ["r0 later"], a
        a = api.get(base + "?rank=0&after=%d" % a.json["next"])
        assert a.json["lines"] == [], a

        n.exit_workers(jid, 0)
        api.wait_state(jid, "SUCCEEDED", poke=n.beat)
        # The tail of a finished job is still there.
        a = api.get(base + "?tail=2")
        assert [ln["text"] for ln in a.json["lines"]] == ["r1 later", "r0 later"], a


if __name__ == "__main__":
    api_sim.run_tests(globals())
