#!/usr/bin/env bash
# bench/api: ddpd under load with wrk (Debian package), on 127.0.0.1 only.
#   1. GET /v1/jobs/{id} as fast as wrk can (goal: >= 20000 requests/s on the 2-core machine)
#   2. heartbeats of N simulated nodes (default 1000) at about one beat per node per second
#      (wrk's per-connection delay; the achieved rate is printed; goal: p99 < 10 ms)
#   3. the same heartbeats as fast as wrk can (capacity)
# Prints one table (requests/s, p50, p99, non-2xx) and the goal ratios (>= 1 meets the goal).
# ddpd runs on a fresh temporary DDP_HOME with --node-timeout 3600, so that the nodes stay
# READY between the runs and the figures are those of the steady state.
# Environment: DDP_BIN (folder with ddpd; default build/bin), BENCH_DURATION (s, default 10),
# BENCH_THREADS (wrk threads, default 2), BENCH_CONNS (GET connections, default 64),
# BENCH_NODES (default 1000), BENCH_BEAT_CONNS (connections for the 1 beat/s run, default 50).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${DDP_BIN:-$repo/build/bin}
dur=${BENCH_DURATION:-10}
threads=${BENCH_THREADS:-2}
conns=${BENCH_CONNS:-64}
nodes=${BENCH_NODES:-1000}
beat_conns=${BENCH_BEAT_CONNS:-50}

if [ ! -x "$bin/ddpd" ]; then
  echo "bench/api: $bin/ddpd not found (build it: cmake --build build --target ddpd)" >&2
  exit 1
fi
if ! command -v wrk >/dev/null; then
  echo "== installing wrk (apt-get)"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -q wrk >/dev/null
fi

tmp=$(mktemp -d /tmp/ddp-bench-api.XXXXXX)
ddpd_pid=""
cleanup() {
  if [ -n "$ddpd_pid" ] && kill -0 "$ddpd_pid" 2>/dev/null; then
    kill "$ddpd_pid"
    for _ in $(seq 50); do kill -0 "$ddpd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$ddpd_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$tmp/home"
DDP_HOME="$tmp/home" "$bin/ddpd" --listen "127.0.0.1:$port" --node-timeout 3600 \
  >"$tmp/ddpd.log" 2>&1 &
ddpd_pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 200); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  kill -0 "$ddpd_pid" 2>/dev/null || { cat "$tmp/ddpd.log"; exit 1; }
  sleep 0.1
done
curl -fsS "$url/healthz" >/dev/null
user=$(cat "$tmp/home/user.token")
agent=$(cat "$tmp/home/agent.token")

echo "== registering $nodes simulated nodes"
job=$(/usr/bin/python3 "$here/setup_nodes.py" 127.0.0.1 "$port" "$agent" "$user" "$nodes")

run_wrk() { # name, output file, wrk args...
  local name=$1 out=$2
  shift 2
  echo "== $name"
  wrk --latency "$@" >"$out" 2>&1 || { cat "$out"; exit 1; }
}

run_wrk "GET /v1/jobs/$job, $conns connections, ${dur}s" "$tmp/get.txt" \
  -t"$threads" -c"$conns" -d"${dur}s" -H "Authorization: Bearer $user" "$url/v1/jobs/$job"
# About one beat per node per second: each connection pauses conns*1000/nodes ms per beat.
pause=$((beat_conns * 1000 / nodes))
BENCH_TOKEN=$agent BENCH_NODES=$nodes BENCH_THREADS=$threads BENCH_DELAY_MS=$pause \
  run_wrk "heartbeats, $nodes nodes at ~1 beat/s ($beat_conns connections, ${pause} ms pause)" \
  "$tmp/beat1.txt" -t"$threads" -c"$beat_conns" -d"${dur}s" -s "$here/heartbeat.lua" "$url"
BENCH_TOKEN=$agent BENCH_NODES=$nodes BENCH_THREADS=$threads BENCH_DELAY_MS=0 \
  run_wrk "heartbeats, $nodes nodes, as fast as possible ($conns connections)" \
  "$tmp/beatmax.txt" -t"$threads" -c"$conns" -d"${dur}s" -s "$here/heartbeat.lua" "$url"

/usr/bin/python3 - "$tmp" "$nodes" "$(nproc)" <<'EOF'
import os
import re
import sys

tmp, nodes, cpus = sys.argv[1], int(sys.argv[2]), sys.argv[3]
UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def parse(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    lat = {}
    for pct, val, unit in re.findall(r"^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$", text,
                                     re.M):
        lat[pct] = float(val) * UNIT[unit]
    m = re.search(r"Non-2xx or 3xx responses:\s+([0-9]+)", text)
    bad = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), "
                  r"timeout ([0-9]+)", text)
    errs = sum(int(x) for x in m.groups()) if m else 0
    return rps, lat.get("50"), lat.get("99"), bad, errs


rows = [("GET /v1/jobs/{id} (max)", parse(tmp + "/get.txt")),
        ("heartbeat, %d nodes @ ~1/s" % nodes, parse(tmp + "/beat1.txt")),
        ("heartbeat, %d nodes (max)" % nodes, parse(tmp + "/beatmax.txt"))]
print()
print("ddpd under wrk on 127.0.0.1 (%s CPUs, shared with wrk; load average now %.1f)"
      % (cpus, os.getloadavg()[0]))
print("%-32s %12s %9s %9s %8s %7s" % ("run", "requests/s", "p50 ms", "p99 ms", "non-2xx",
                                      "errors"))
for name, (rps, p50, p99, bad, errs) in rows:
    print("%-32s %12.0f %9.3f %9.3f %8d %7d" % (name, rps, p50, p99, bad, errs))
get_rps = rows[0][1][0]
beat_rps, beat_p99 = rows[1][1][0], rows[1][1][2]
print()
print("goal GET >= 20000/s:            %.0f/s   ratio %.2f" % (get_rps, get_rps / 20000.0))
print("goal %d nodes at 1 beat/s, p99 < 10 ms: %.0f beats/s achieved (%.2f of %d), "
      "p99 %.3f ms   ratio %.2f" % (nodes, beat_rps, beat_rps / nodes, nodes, beat_p99,
                                    10.0 / beat_p99 if beat_p99 else float("inf")))
failed = sum(r[1][3] + r[1][4] for r in rows)
if failed:
    print("WARNING: %d non-2xx answers or socket errors (see above)" % failed)
EOF
