#!/usr/bin/env bash
# bench/allreduce: libddp's CPU all-reduce at W = 2 and 4 local ranks (processes), 4 KiB to
# 64 MiB in x4 steps, in nccl-tests' columns (busbw = algbw * 2(n-1)/n), with the machine's
# memcpy bandwidth as the physical reference, side by side with its peers measured in the same
# run (ours: a private buffer; ours-reg: a registered one from comm_alloc_buffer, as the
# reducer's gradients; ours-tcp: the TCP ring forced): PyTorch's gloo (bench/peers/gloo_allreduce.py, torch threads 1) and Open MPI's
# MPI_Allreduce over shared memory (bench/peers/mpi_allreduce.c, btl self,vader). For each W,
# REPS rounds (ours, gloo, mpi in turn), then one table of the median times and busbw with
# the ratios ours / peer (bench/peers/compare_allreduce.py). The host is shared: compare
# within one run only. The peers are installed by bench/peers/setup.sh (apt-get) on the
# first run.
#
# Usage: bench/allreduce/run.sh [extra ddp-bench-allreduce flags]
# Environment: DDP_BIN (else build/bin; builds the driver into build/ when missing),
# REPS (3), PEERS=0 (ours only), VERBOSE=1 (print every raw table too).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${DDP_BIN:-$src/build/bin}
if [ ! -x "$bin/ddp-bench-allreduce" ]; then
  echo "== building ddp-bench-allreduce into $src/build" >&2
  cmake -S "$src" -B "$src/build" >/dev/null
  cmake --build "$src/build" -j"$(nproc)" --target ddp-bench-allreduce >/dev/null
  bin=$src/build/bin
fi
reps=${REPS:-3}
# label=driver flags, one per our variant
usage=$("$bin/ddp-bench-allreduce" --help 2>&1 || true)
if grep -q -- --buffer <<<"$usage"; then
  # ours-reg: the buffer from comm_alloc_buffer (shared between the ranks, all-reduced where
  # it lies), as the reducer's gradients are; ours: the caller's own malloc'd array
  variants=("ours=--transport auto" "ours-reg=--transport auto --buffer comm"
            "ours-tcp=--transport tcp")
elif grep -q -- --transport <<<"$usage"; then
  variants=("ours=--transport auto" "ours-tcp=--transport tcp")
else
  variants=("ours=")
fi
peers=${PEERS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$peers" = 1 ]; then
  pdir=$("$src/bench/peers/setup.sh" "$(dirname "$bin")/peers")
fi
show() { if [ "${VERBOSE:-0}" = 1 ]; then cat "$1"; echo; elif [ "$2" = 1 ]; then grep '^#' "$1" || true; fi; }
echo "# host: $(nproc) cores, $(uname -sr); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ "$peers" = 1 ] && echo "# $(cat "$pdir/torch_blas.txt")"
for w in 2 4; do
  mpi="" gloo=""
  for ((i = 1; i <= reps; i++)); do
    mcflag=(--memcpy) # the memcpy reference once a round, with the first variant
    for v in "${variants[@]}"; do
      read -r -a flags <<<"${v#*=}"
      f=$work/${v%%=*}.$w.$i
      "$bin/ddp-bench-allreduce" --world "$w" "${flags[@]}" "${mcflag[@]}" "$@" >"$f"
      show "$f" "$i"
      mcflag=()
    done
    [ "$peers" = 1 ] || continue
    /usr/bin/python3 "$src/bench/peers/gloo_allreduce.py" --world "$w" >"$work/gloo.$w.$i"
    show "$work/gloo.$w.$i" "$i"
    mpirun --allow-run-as-root --oversubscribe -np "$w" --mca btl self,vader \
      "$pdir/mpi_allreduce" >"$work/mpi.$w.$i"
    show "$work/mpi.$w.$i" "$i"
    gloo+=${gloo:+,}$work/gloo.$w.$i
    mpi+=${mpi:+,}$work/mpi.$w.$i
  done
  args=() mc=""
  for v in "${variants[@]}"; do
    files=$(printf '%s\n' "$work/${v%%=*}".$w.* | paste -sd,)
    args+=("${v%%=*}=$files")
    mc=${mc:-$files}
  done
  if [ "$peers" = 1 ]; then
    /usr/bin/python3 "$src/bench/peers/compare_allreduce.py" --world "$w" --memcpy "$mc" \
      "${args[@]}" -- gloo="$gloo" mpi="$mpi"
  else
    for v in "${variants[@]}"; do cat "$work/${v%%=*}".$w.*; done
  fi
  echo
done
echo "# every time: median over iterations of the slowest rank's; then median over $reps rounds"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores: a shared, noisy host"
