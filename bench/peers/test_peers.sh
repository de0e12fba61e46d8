#!/usr/bin/env bash
# bench/peers/test_peers.sh - ctest bench_peers: the benchmark peers work and their tables say
# what they should.
#   1. compare_allreduce.py on fixture tables (testdata/): medians over rounds, busbw from the
#      median time, the ratios and the memcpy line, to the digit.
#   2. mpi_allreduce (when mpicc and mpirun are installed): built with mpicc, 2 ranks, 4 and
#      16 KiB: two rows of six columns with a positive time, busbw = algbw here (W = 2).
#   3. gloo_allreduce.py and torch_ddp.py (when Debian's python3-torch is installed): 2 ranks,
#      tiny sizes / a tiny MLP on synthetic data: the rows, then the RESULT line with a
#      positive samples/s and one RSS per rank.
# A peer that is not installed is reported and skipped (CI need not install the peers:
# bench/peers/setup.sh does); if none of 2 and 3 could run the test says so and exits 77
# (ctest SKIP). Every run is under `timeout`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# -- 1. the comparison's arithmetic -------------------------------------------------------------
d=$here/testdata
out=$("$py" "$here/compare_allreduce.py" --world 4 --memcpy "$d/ours.1,$d/ours.2,$d/ours.3" \
  ours="$d/ours.1,$d/ours.2,$d/ours.3" -- gloo="$d/gloo.1" mpi="$d/mpi.1")
echo "$out"
for want in \
  "    4 KiB       200.0    0.031      1000.0    0.006        50.0    0.123           5.00x           0.25x" \
  "   64 MiB    500000.0    0.201    250000.0    0.403   1000000.0    0.101           0.50x           2.00x" \
  "# ours vs gloo: 64 MiB busbw 0.50x; 4 KiB time 0.200x (200.0 us vs 1000.0 us; < 1 is ours faster)" \
  "# ours vs mpi: 64 MiB busbw 2.00x; 4 KiB time 4.000x (200.0 us vs 50.0 us; < 1 is ours faster)" \
  "# ours 64 MiB busbw 0.201 GB/s: memcpy (3.00 GB/s) is 14.90x that"; do
  grep -qxF -- "$want" <<<"$out" || fail "compare_allreduce: no line '$want'"
done
# 16 KiB is only in gloo's table: it must not appear.
! grep -q '16 KiB' <<<"$out" || fail "compare_allreduce: a size missing from some tables shown"
"$py" "$here/compare_allreduce.py" --world 4 ours="$work/none" -- gloo="$d/gloo.1" \
  >/dev/null 2>&1 && fail "compare_allreduce: a missing file accepted"

# rows SIZE... : checks the nccl-tests rows of a table on stdin (W = 2: busbw == algbw)
check_rows() {
  "$py" -c '
import sys
want = [int(s) for s in sys.argv[1:]]
rows = [l.split() for l in sys.stdin if l.strip() and not l.startswith("#")]
rows = [r for r in rows if r[0] != "size(B)"]
assert [int(r[0]) for r in rows] == want, rows
for r in rows:
    assert len(r) == 6 and r[2] == "float" and int(r[1]) * 4 == int(r[0]), r
    t, alg, bus = float(r[3]), float(r[4]), float(r[5])
    assert t > 0 and alg > 0 and abs(bus - alg) <= 0.002, r
' "$@"
}

ran=0
# -- 2. Open MPI ------------------------------------------------------------------------------
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -std=c11 -O2 -Wall -Wextra -Wshadow -Werror -o "$work/mpi_allreduce" \
    "$here/mpi_allreduce.c" || fail "mpicc"
  t=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    "$work/mpi_allreduce" --min-bytes 4096 --max-bytes 16384 --iters 5) || fail "mpirun: $t"
  echo "$t"
  check_rows 4096 16384 <<<"$t" || fail "mpi_allreduce rows"
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    "$work/mpi_allreduce" --factor 1 >/dev/null 2>&1 && fail "mpi_allreduce: --factor 1 accepted"
  ran=1
else
  echo "skip: Open MPI (mpicc, mpirun) is not installed"
fi

# -- 3. PyTorch (gloo, DDP) -----------------------------------------------------------------------
if "$py" -c 'import torch.distributed' 2>/dev/null; then
  t=$(timeout 240 "$py" "$here/gloo_allreduce.py" --world 2 --min-bytes 4096 \
    --max-bytes 16384 --iters 5) || fail "gloo_allreduce.py: $t"
  echo "$t"
  check_rows 4096 16384 <<<"$t" || fail "gloo_allreduce rows"
  t=$(timeout 240 "$py" "$here/torch_ddp.py" --world 2 --model mlp:16-8-4 \
    --data synthetic:640:16:4 --epochs 1 --batch-size 16) || fail "torch_ddp.py: $t"
  echo "$t"
  grep -qE '^epoch 1/1 \| loss [0-9.]+ \| test acc [0-9.]+ \| [0-9,]+ samples/s$' <<<"$t" ||
    fail "torch_ddp.py: no epoch line"
  grep -qE '^RESULT samples_per_s=[0-9]*[1-9][0-9]*\.[0-9] peak_rss_kib=[0-9]+,[0-9]+ model_bytes=[0-9]+$' \
    <<<"$t" || fail "torch_ddp.py: no RESULT line with 2 ranks"
  # model_bytes: 3 x 4 x (16*8+8 + 8*4+4) + 16 x (16*4 + 8) = 2064 + 1152 = 3216
  grep -q 'model_bytes=3216$' <<<"$t" || fail "torch_ddp.py: model_bytes"
  ran=1
else
  echo "skip: Debian's python3-torch is not installed"
fi
if [ "$ran" = 0 ]; then
  echo "no peer installed (bench/peers/setup.sh installs them): only the arithmetic was checked"
  exit 77
fi
echo "bench_peers: ok"
