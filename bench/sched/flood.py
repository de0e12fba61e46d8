#!/usr/bin/env python3
"""Scheduling work with many waiting jobs: one user, a quota of 1 slot, no node up, submits
N jobs over one keep-alive connection; prints the time of each 500 submits and, after them,
the median and worst GET /v1/nodes of 20 (each pass of the scheduler holds ddpd's lock, so a
pass that grows with the queue shows here). Each build of ddpd given is measured in turn.

    python3 bench/sched/flood.py [N] [DDPD ...]    # default 3000 build/bin/ddpd
"""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(conn, method, path, token, body=None):
    hdr = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    conn.request(method, path, json.dumps(body) if body is not None else None, hdr)
    r = conn.getresponse()
    data = r.read()
    return r.status, json.loads(data) if data else None


def measure(ddpd, n):
    tmp = tempfile.mkdtemp(prefix="ddp-bench-sched-")
    port = free_port()
    log = open(os.path.join(tmp, "ddpd.log"), "wb")
    p = subprocess.Popen([ddpd, "--listen", "127.0.0.1:%d" % port, "--db",
                          os.path.join(tmp, "ddp.db")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(tmp, "user.token")):
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit("ddpd did not start: see %s" % tmp)
            time.sleep(0.05)
        time.sleep(0.3)
        admin = open(os.path.join(tmp, "user.token")).read().strip()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        st, ans = call(conn, "POST", "/v1/users", admin, {"name": "bob", "max_slots": 1})
        assert st == 201, (st, ans)
        bob = ans["token"]
        steps = []
        t0 = time.monotonic()
        for i in range(n):
            st, ans = call(conn, "POST", "/v1/jobs", bob, {"command": ["true"]})
            assert st == 201, (st, ans)
            if (i + 1) % 500 == 0:
                steps.append(time.monotonic() - t0)
                t0 = time.monotonic()
        gets = []
        for _ in range(20):
            t = time.monotonic()
            st, _ = call(conn, "GET", "/v1/nodes", admin)
            gets.append((time.monotonic() - t) * 1000)
            time.sleep(0.05)
        return steps, statistics.median(gets), max(gets)
    finally:
        p.terminate()
        p.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 3000
    builds = args or [os.path.join(ROOT, "build", "bin", "ddpd")]
    print("# %d submits of one user (quota 1 slot, no node); s per 500 submits, then GET "
          "/v1/nodes ms (median, max of 20)" % n)
    print("%-40s %s %10s %8s" % ("ddpd", " ".join("%6d" % (500 * (i + 1))
                                                  for i in range(n // 500)), "get_med", "get_max"))
    for b in builds:
        steps, med, worst = measure(b, n)
        print("%-40s %s %10.1f %8.1f" % (b[-40:], " ".join("%6.2f" % s for s in steps), med,
                                        worst))


if __name__ == "__main__":
    main()
