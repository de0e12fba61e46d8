"""bench/api helper: registers N simulated nodes bn-0 .. bn-(N-1) (incarnation inc-<i>, one
slot each) on a running ddpd, beats each once, and submits one job that stays PENDING (it asks
for more nodes than exist) for the GET benchmark. Prints the job id.
Usage: setup_nodes.py HOST PORT AGENT_TOKEN USER_TOKEN N"""
import http.client
import json
import sys


def call(conn, method, path, token, body):
    conn.request(method, path, body=json.dumps(body),
                 headers={"Authorization": "Bearer " + token,
                          "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status not in (200, 201):
        raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:300]))
    return json.loads(data)


def main():
    host, port, agent, user, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], \
        int(sys.argv[5])
    conn = http.client.HTTPConnection(host, port, timeout=30)
    for i in range(n):
        call(conn, "POST", "/v1/nodes:register", agent, {
            "name": "bn-%d" % i, "address": "127.0.0.1", "slots": 1,
            "port_range": "29500-29999", "incarnation": "inc-%d" % i})
    for i in range(n):
        call(conn, "POST", "/v1/nodes/bn-%d:heartbeat" % i, agent,
             {"incarnation": "inc-%d" % i, "version": 0, "wait_ms": 0, "workers": []})
    job = call(conn, "POST", "/v1/jobs", user, {
        "command": ["ddp-worker", "--epochs", "10"], "name": "bench",
        "nnodes": "%d" % min(1024, n + 1), "env": {"K": "V"}})
    print(job["id"])


if __name__ == "__main__":
    main()
