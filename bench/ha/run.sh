#!/usr/bin/env bash
# bench/ha: three ddpd replicas (--cluster) against one ddpd on its SQLite file (--db), on
# 127.0.0.1 only, in one run (python3 standard library; see README.md):
#   1. failover: kill -9 of the leader to the first accepted POST /v1/jobs (a client walking
#      the three addresses, following 307 and not_leader, with an Idempotency-Key); median and
#      max of BENCH_KILLS kills, at dqlite's default timers and at --raft-latency-ms 20
#   2. submit latency p50/p99 of BENCH_SUBMITS sequential submits to the leader
#      (goal: cluster p99 <= 10 ms), cluster vs db
#   3. GET /v1/jobs/{id} per second on the leader, keep-alive (goal: cluster/db >= 0.8)
#   4. heartbeats of BENCH_NODES nodes at 1 Hz through a kill -9 of the leader
#      (goal: p99 <= 20 ms through a leader change): latency before and after, failed beats,
#      the outage
# Prints one table and the goal ratios. Everything runs in a fresh temporary folder, removed
# at the end with every process started.
# Environment: DDP_BIN (folder with ddpd; default build/bin), BENCH_KILLS (5), BENCH_SUBMITS
# (500), BENCH_GET_PROCS (4), BENCH_GET_S (5), BENCH_NODES (1000), BENCH_BEAT_S (20),
# BENCH_BEAT_KILL_S (10), BENCH_BEAT_PROCS (4), BENCH_BEAT_THREADS (4 per process).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${DDP_BIN:-$repo/build/bin}

if [ ! -x "$bin/ddpd" ]; then
  echo "bench/ha: $bin/ddpd not found (build it: cmake --build build --target ddpd)" >&2
  exit 1
fi
if ! "$bin/ddpd" --help 2>&1 | grep -q -- --cluster; then
  echo "bench/ha: $bin/ddpd has no --cluster (built without libdqlite?)" >&2
  exit 1
fi
exec /usr/bin/python3 "$here/ha.py" "$bin"
