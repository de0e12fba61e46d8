#!/usr/bin/env bash
# bench/allreduce: libddp's CPU all-reduce at W = 2 and 4 local ranks (processes), 4 KiB to
# 64 MiB in x4 steps, in nccl-tests' columns (busbw = algbw * 2(n-1)/n), with the machine's
# memcpy bandwidth as the physical reference. Peers (gloo, Open MPI) come with issue 7.
#
# Usage: bench/allreduce/run.sh [extra ddp-bench-allreduce flags]
# Finds the driver in $DDP_BIN, else build/bin; builds it into build/ when missing.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${DDP_BIN:-$src/build/bin}
if [ ! -x "$bin/ddp-bench-allreduce" ]; then
  echo "== building ddp-bench-allreduce into $src/build" >&2
  cmake -S "$src" -B "$src/build" >/dev/null
  cmake --build "$src/build" -j"$(nproc)" --target ddp-bench-allreduce >/dev/null
  bin=$src/build/bin
fi
echo "# host: $(nproc) cores, $(uname -sr); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
"$bin/ddp-bench-allreduce" --world 2 --memcpy "$@"
echo
"$bin/ddp-bench-allreduce" --world 4 "$@"
