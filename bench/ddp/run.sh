#!/usr/bin/env bash
# bench/ddp: ddp-worker's training throughput (samples/s) at W = 1 and 2 ranks on this host,
# for the main MLP 784-256-128-10 and the large MLP 1024-4096-4096-10 on synthetic data,
# with the reducer's overlap on and off, and how much of the communication time the overlap
# hides:  hidden = 1 - exposed(overlap on) / comm(overlap off), from the runtime's trace
# (comm = first bucket issued -> last bucket done; exposed = end of backward -> last bucket
# done; medians over the steps); and, from the throughput, the step time the overlap saves
# as a share of the communication time without it (saved). On a host with fewer cores than
# ranks x 2 threads the comm thread competes with the backward for the same core, so comm_ms
# grows with overlap on and "hidden" can be negative while "saved" stays positive.
# One OpenBLAS thread per rank (OMP_NUM_THREADS=1), CPU backend (shared memory between these same-host ranks; DDP_COMM_TRANSPORT=tcp forces the TCP ring). Peer:
# PyTorch DDP (gloo) on the same MLP, data, batch and bucket cap (bench/peers/torch_ddp.py),
# where torch exists.
# Usage: bench/ddp/run.sh [BUILD_DIR]   (default build; needs BUILD_DIR/bin/ddp-worker)
# Then the side-by-side table with PyTorch DDP and peak memory (PEERS=0: ours only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-$repo/build}
worker=$build/bin/ddp-worker
[ -x "$worker" ] || { echo "no $worker: build first" >&2; exit 1; }
# The same OpenBLAS kernels for every peer: ddp-worker chooses them where OpenBLAS falls back
# to its generic ones (trainer/blas_core.h); PyTorch's OpenBLAS gets the same choice.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$build/bin/ddp-worker" --blas-core)}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# The peers (Debian's PyTorch with OpenBLAS, Open MPI) come from bench/peers/setup.sh, which
# installs them when missing; PEERS=0 skips that and the side-by-side table at the end.
PEERS=${PEERS:-1}
if [ "$PEERS" = 1 ]; then
  "$repo/bench/peers/setup.sh" "$build/peers" >/dev/null
fi

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# run W MODEL DIM STEPS BATCH CAP OVERLAP(1|0) -> "samples_per_s comm_ms exposed_ms comm_sf_ms
# exposed_sf_ms" (trace_stats.py)
run() {
  local w=$1 model=$2 dim=$3 steps=$4 batch=$5 cap=$6 ov=$7
  local n=$((w * batch * steps)) port
  port=$(free_port)
  local extra=()
  [ "$ov" = 1 ] || extra=(--no-overlap)
  pids=()
  for ((r = 0; r < w; r++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r \
    LOCAL_WORLD_SIZE=$w GROUP_RANK=0 GROUP_WORLD_SIZE=1 OMP_NUM_THREADS=1 DDP_LOG_LEVEL=warn \
      timeout 600 "$worker" --model "$model" --data "synthetic:$n:$dim:10" --epochs 1 \
      --batch-size "$batch" --bucket-cap-mb "$cap" --trace "$work/t{rank}" "${extra[@]}" \
      >"$work/out$r" 2>"$work/err$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$work"/err*; exit 1; }; done
  pids=()
  local sps
  sps=$(sed -n 's/.*| \([0-9,]*\) samples\/s$/\1/p' "$work/out0" | tr -d ,)
  local traces=()
  for ((r = 0; r < w; r++)); do traces+=("$work/t$r"); done
  echo "$sps $(python3 "$here/trace_stats.py" "${traces[@]}")"
}

# torch W MODEL DIM STEPS BATCH CAP -> samples_per_s of PyTorch DDP (gloo) on the same
# synthetic data as run(), by the peer bench/peers/torch_ddp.py, or "-" without torch
torch_run() {
  local w=$1 model=$2 dim=$3 steps=$4 batch=$5 cap=$6
  /usr/bin/python3 -c 'import torch' 2>/dev/null || { echo -; return; }
  OMP_NUM_THREADS=1 timeout 600 /usr/bin/python3 "$repo/bench/peers/torch_ddp.py" --world "$w" \
    --model "$model" --data "synthetic:$((w * batch * steps)):$dim:10" --epochs 1 \
    --batch-size "$batch" --bucket-cap-mb "$cap" >"$work/tout" 2>"$work/terr" ||
    { cat "$work/terr"; exit 1; }
  sed -n 's/^RESULT samples_per_s=\([0-9]*\).*/\1/p' "$work/tout"
}

# best of REPS runs (the host is shared; the best run is the least disturbed)
REPS=${REPS:-2}
ratio() { python3 -c "import sys; a, b = sys.argv[1:]; print('%.2f' % (float(a) / float(b)) if b not in ('-', '', '0') else '-')" "$1" "$2"; }
best() {
  local top="" line
  for ((i = 0; i < REPS; i++)); do
    line=$(run "$@")
    if [ -z "$top" ] || [ "${line%% *}" -gt "${top%% *}" ]; then top=$line; fi
  done
  echo "$top"
}

printf '%-24s %6s %2s %7s %10s %6s %8s %10s %7s %9s %6s %10s %6s\n' model cap_mb W overlap samples/s vs_W1 comm_ms exposed_ms hidden hidden_sf saved torch_ddp ours/t
for spec in "mlp:784-256-128-10 784 300 25" "mlp:784-256-128-10 784 300 0.1" \
            "mlp:1024-4096-4096-10 1024 20 25"; do
  set -- $spec
  model=$1 dim=$2 steps=$3 cap=$4
  read -r base _ < <(best 1 "$model" "$dim" "$steps" 32 "$cap" 1)
  t1=$(torch_run 1 "$model" "$dim" "$steps" 32 "$cap")
  printf '%-24s %6s %2d %7s %10s %6s %8s %10s %7s %9s %6s %10s %6s\n' "$model" "$cap" 1 - "$base" 1.00 - - - - - \
    "$t1" "$(ratio "$base" "$t1")"
  read -r s_off c_off e_off cs_off _ < <(best 2 "$model" "$dim" "$steps" 32 "$cap" 0)
  read -r s_on c_on e_on _ es_on < <(best 2 "$model" "$dim" "$steps" 32 "$cap" 1)
  hidden=$(python3 -c "c=$c_off; e=$e_on; print('%.0f%%' % (100*(1-e/c)) if c > 0 else '-')")
  hidden_sf=$(python3 -c "c=$cs_off; e=$es_on; print('%.0f%%' % (100*(1-e/c)) if c > 0 else '-')")
  # step time saved by overlapping (a step is W*B = 2*32 = 64 samples), as a share of the communication time without overlap
  saved=$(python3 -c "c=$c_off; a=64.0/$s_off; b=64.0/$s_on; print('%.0f%%' % (100*(a-b)*1000/c) if c > 0 else '-')")
  r_off=$(python3 -c "print('%.2f' % ($s_off/$base))")
  r_on=$(python3 -c "print('%.2f' % ($s_on/$base))")
  t2=$(torch_run 2 "$model" "$dim" "$steps" 32 "$cap")
  printf '%-24s %6s %2d %7s %10s %6s %8s %10s %7s %9s %6s %10s %6s\n' "$model" "$cap" 2 off "$s_off" "$r_off" "$c_off" "$e_off" - - - - -
  printf '%-24s %6s %2d %7s %10s %6s %8s %10s %7s %9s %6s %10s %6s\n' "$model" "$cap" 2 on "$s_on" "$r_on" "$c_on" "$e_on" "$hidden" "$hidden_sf" "$saved" \
    "$t2" "$(ratio "$s_on" "$t2")"
done
echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); OMP_NUM_THREADS=1 per rank;"
echo "# batch 32 per rank; CPU backend (shared memory between same-host ranks unless DDP_COMM_TRANSPORT=tcp); best of $REPS runs each;"
echo "# torch_ddp: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo absent) DDP, gloo, same MLP, batch, bucket cap,"
echo "#   1 thread per rank, OpenBLAS (Debian's libblas.so.3 alternative), one run; ours/t = ours / torch"
echo "# hidden = 1 - exposed_ms(overlap on) / comm_ms(overlap off), medians over the steps, rank 0's trace:"
echo "#   rank 0's wait for a slower rank's backward counts as communication"
echo "# hidden_sf = the same from the skew-free figures: clocks start when the last rank is ready"
echo "#   (all ranks' traces, one clock), so only the communication itself counts"
echo "# saved  = (step time off - step time on) / comm_ms(off), step time = 64 samples / samples/s"
# Side by side with PyTorch DDP on the same data and sampler (Fashion-MNIST too), medians of
# PEER_REPS paired runs, and the peak memory per rank against params + grads + momentum +
# batch (bench/peers/ddp_side_by_side.py).
if [ "$PEERS" = 1 ]; then
  echo
  echo "# $(cat "$build/peers/torch_blas.txt")"
  /usr/bin/python3 "$repo/bench/peers/ddp_side_by_side.py" --worker "$worker" \
    --reps "${PEER_REPS:-3}"
fi
