"""Durability of a real ddpd: `kill -9` in the middle of 200 submits from 8 parallel clients,
then a restart on the same DDP_HOME. Every acknowledged (201) job is there exactly once with
the spec it was sent, no job is half-written (every job matches the OpenAPI schema, the SQLite
file passes integrity_check), ids are never reused, and the restarted ddpd still knows the
nodes (LOST until they beat, then READY) and carries on with the running job."""
import sqlite3
import threading

import api_sim
from api_sim import Api, SimNode, beat_all, cluster, db_path, wait_assigned, wait_for

CLIENTS = 8
PER_CLIENT = 25


def test_durability_kill9_during_submits():
    with cluster(node_timeout=300) as c:
        api = Api(c)
        na, nb = SimNode(api, "dur-a", slots=1), SimNode(api, "dur-b", slots=1)
        for n in (na, nb):
            n.register()
            n.beat()
        run = api.submit({"command": ["w"], "nnodes": "2", "name": "running-one"})
        wait_assigned(run["id"], [na, nb])
        api.wait_state(run["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        acked, lock = {}, threading.Lock()
        errors = []

        def client(t):
            for i in range(PER_CLIENT):
                name = "d-%d-%d" % (t, i)
                try:
                    # Not through Api: an answer cut by the kill is expected here.
                    a = c.request("POST", "/v1/jobs", body={
                        "command": ["echo", name], "name": name, "nnodes": "3"}, timeout=20)
                except Exception:  # refused or reset by the kill: not acknowledged
                    continue
                if a.status == 201:
                    with lock:
                        acked[name] = a.json["id"]
                else:
                    errors.append(a)
        # Meanwhile node dur-a ships 10 log lines a beat; a 200 means they are stored.
        xa = na.assignment(run["id"])
        log_rank = xa["group_rank"] * xa["nproc_per_node"]
        log_acked = [0]

        def log_beater():
            seq = 1
            for _ in range(5000):
                body = na.beat_body()
                body["logs"] = [{"job_id": run["id"], "generation": xa["generation"],
                                 "rank": log_rank, "seq": seq,
                                 "lines": ["L%d" % i for i in range(seq, seq + 10)]}]
                try:
                    a = c.request("POST", "/v1/nodes/dur-a:heartbeat", body=body,
                                  token="node", timeout=20)
                except Exception:  # ddpd killed: the lines were not acknowledged
                    return
                if a.status != 200:
                    errors.append(a)
                    return
                seq += 10
                log_acked[0] = seq - 1
        threads = [threading.Thread(target=client, args=(t,)) for t in range(CLIENTS)]
        threads.append(threading.Thread(target=log_beater))
        for th in threads:
            th.start()
        try:
            wait_for("40 acknowledged submits", lambda: len(acked) >= 40 or errors,
                     timeout=120, interval=0.005)
        finally:
            c.kill_ddpd()
            for th in threads:
                th.join(timeout=60)
        assert not errors, errors[:3]
        assert not any(th.is_alive() for th in threads), "a client thread hangs"
        n_acked = len(acked)
        assert 40 <= n_acked < CLIENTS * PER_CLIENT, \
            "kill -9 did not land in the middle (%d acknowledged)" % n_acked
        con = sqlite3.connect(db_path(c), timeout=10)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            con.close()
        c.start_ddpd()
        jobs = api.all_jobs()  # each checked against the Job schema by Api
        ids = [j["id"] for j in jobs]
        assert len(ids) == len(set(ids)), "duplicate ids after restart"
        by_name = {}
        for j in jobs:
            by_name.setdefault(j["name"], []).append(j)
        lost = [n for n in acked if n not in by_name]
        assert not lost, "%d acknowledged jobs lost: %s" % (len(lost), lost[:10])
        for name, jid in acked.items():
            js = by_name[name]
            assert len(js) == 1, "job %s stored %d times" % (name, len(js))
            j = js[0]
            assert j["id"] == jid, (name, jid, j["id"])
            assert j["spec"]["command"] == ["echo", name] and j["state"] == "PENDING", j
        for name, js in by_name.items():
            if name.startswith("d-"):
                assert len(js) == 1 and js[0]["spec"]["command"] == ["echo", name], js
        extra = len([n for n in by_name if n.startswith("d-")]) - n_acked
        print("acknowledged %d of %d before kill -9; %d more stored but unacknowledged"
              % (n_acked, CLIENTS * PER_CLIENT, extra))
        # Every acknowledged log line is there once, in order.
        texts, after = [], 0
        for _ in range(1000):
            a = api.get("/v1/jobs/%s/logs?rank=%d&limit=1000&after=%d" % (run["id"], log_rank,
                                                                         after))
            assert a.status == 200, a
            if not a.json["lines"]:
                break
            texts += [ln["text"] for ln in a.json["lines"]]
            after = a.json["next"]
        assert log_acked[0] > 0, "no log beat acknowledged before the kill"
        assert texts[:log_acked[0]] == ["L%d" % i for i in range(1, log_acked[0] + 1)], \
            "acknowledged log lines lost or duplicated (%d acknowledged, %d stored)" % (
                log_acked[0], len(texts))
        assert texts == ["L%d" % i for i in range(1, len(texts) + 1)], "log lines out of order"
        print("log lines: %d acknowledged, %d stored" % (log_acked[0], len(texts)))
        # The nodes are known, LOST until they beat; the running job carries on.
        nodes = api.nodes()
        assert {k: v["state"] for k, v in nodes.items()} == \
            {"dur-a": "LOST", "dur-b": "LOST"}, nodes
        j = api.job(run["id"])
        assert j["state"] in ("RUNNING", "RESTARTING") and j["generation"] >= 1, j
        wait_for("nodes READY again", lambda: beat_all([na, nb]) or all(
            v["state"] == "READY" for v in api.nodes().values()), timeout=30)
        j = api.wait_state(run["id"], "RUNNING", poke=lambda: beat_all([na, nb]))
        assert na.assignment(run["id"]) and nb.assignment(run["id"]), (na.assignments,
                                                                        nb.assignments)
        # Ids are never reused.
        new = api.submit({"command": ["true"]})
        top = max(int(i[2:]) for i in ids)
        assert int(new["id"][2:]) > top, (new["id"], top)


if __name__ == "__main__":
    api_sim.run_tests(globals())
