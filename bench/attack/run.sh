#!/usr/bin/env bash
# bench/attack: what strangers on loopback cost ddpd, a job's rendezvous store and a rank's ring
# port (RSS and latency with real processes); what is measured exactly: bench/attack/run.py.
#
# Usage: bench/attack/run.sh [BUILD_DIR] [run.py flags...]   (default build; needs ddpd and
#        ddp-worker in BUILD_DIR/bin). Writes the table into bench/attack/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
shift || true
exec /usr/bin/python3 "$here/run.py" --build "$build" --readme "$here/README.md" "$@"
