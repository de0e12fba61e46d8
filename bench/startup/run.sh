#!/usr/bin/env bash
# bench/startup: from `ddpctl submit` to every rank at the end of its first training step for
# the 4-rank local job (2 agents x 2 slots on loopback, a temporary cluster), against
# `torchrun --standalone --nproc_per_node 4` (1.13 spelling) running bench/peers/torch_ddp.py to its first
# step. Medians of REPS repetitions (alternating), the ratio ours / torchrun (goal <= 0.5).
# What is measured exactly: bench/startup/startup.py.
#
# Usage: bench/startup/run.sh [BUILD_DIR]   (default build; needs ddpd, ddp-agent,
#        ddp-worker, ddpctl in BUILD_DIR/bin). REPS=5 by default. Installs the peers first
#        (bench/peers/setup.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
for b in ddpd ddp-agent ddp-worker ddpctl; do
  [ -x "$build/bin/$b" ] || { echo "no $build/bin/$b: build first" >&2; exit 1; }
done
"$repo/bench/peers/setup.sh" "$build/peers" >/dev/null
echo "# torch: $(cat "$build/peers/torch_blas.txt"); OMP_NUM_THREADS=1 per rank (both)"
DDP_BIN=$build/bin exec /usr/bin/python3 "$here/startup.py" --reps "${REPS:-5}"
