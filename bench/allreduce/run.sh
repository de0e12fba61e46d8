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
# The same for the reduce-scatter and the all-gather (ddp-bench-allreduce --op; the sharded
# paths): ours and ours-tcp against gloo's all_gather (and, gloo having no reduce-scatter in
# torch 1.13, its all_reduce as "gloo-ar") and Open MPI's MPI_Reduce_scatter_block and
# MPI_Allgather, busbw = algbw * (W-1)/W.
#
# Usage: bench/allreduce/run.sh [extra ddp-bench-allreduce flags]
# Environment: DDP_BIN (else build/bin; builds the driver into build/ when missing),
# REPS (3), PEERS=0 (ours only), VERBOSE=1 (print every raw table too),
# OPS ("allreduce reduce-scatter all-gather": the collectives, in this order).
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
ops=${OPS:-allreduce reduce-scatter all-gather}
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
for op in $ops; do
  case $op in
    allreduce) gop=all_reduce mop=allreduce glabel=gloo opvariants=("${variants[@]}") ;;
    reduce-scatter | all-gather)
      # gloo in Debian's torch 1.13 has no reduce-scatter: its column is the all_reduce a gloo
      # user runs instead (gloo_allreduce.py says so in its header), labelled gloo-ar
      if [ "$op" = reduce-scatter ]; then gop=reduce_scatter mop=reduce_scatter glabel=gloo-ar
      else gop=all_gather mop=allgather glabel=gloo; fi
      # ours-reg: the full buffer from comm_alloc_buffer (the peers' shards read where they
      # lie), where the driver has --buffer
      if grep -q -- --buffer <<<"$usage"; then
        opvariants=("ours=--transport auto --op $op" "ours-reg=--transport auto --buffer comm --op $op"
                    "ours-tcp=--transport tcp --op $op")
      else
        opvariants=("ours=--transport auto --op $op" "ours-tcp=--transport tcp --op $op")
      fi ;;
    *) echo "run.sh: OPS: '$op' is not one of allreduce, reduce-scatter, all-gather" >&2; exit 2 ;;
  esac
  for w in 2 4; do
    mpi="" gloo=""
    for ((i = 1; i <= reps; i++)); do
      mcflag=(--memcpy) # the memcpy reference once a round, with the first variant
      for v in "${opvariants[@]}"; do
        read -r -a flags <<<"${v#*=}"
        f=$work/$op.${v%%=*}.$w.$i
        "$bin/ddp-bench-allreduce" --world "$w" "${flags[@]}" "${mcflag[@]}" "$@" >"$f"
        show "$f" "$i"
        mcflag=()
      done
      [ "$peers" = 1 ] || continue
      /usr/bin/python3 "$src/bench/peers/gloo_allreduce.py" --world "$w" --op "$gop" \
        >"$work/$op.gloo.$w.$i"
      show "$work/$op.gloo.$w.$i" "$i"
      mpirun --allow-run-as-root --oversubscribe -np "$w" --mca btl self,vader \
        "$pdir/mpi_allreduce" --op "$mop" >"$work/$op.mpi.$w.$i"
      show "$work/$op.mpi.$w.$i" "$i"
      gloo+=${gloo:+,}$work/$op.gloo.$w.$i
      mpi+=${mpi:+,}$work/$op.mpi.$w.$i
    done
    args=() mc=""
    for v in "${opvariants[@]}"; do
      files=$(printf '%s\n' "$work/$op.${v%%=*}".$w.* | paste -sd,)
      args+=("${v%%=*}=$files")
      mc=${mc:-$files}
    done
    if [ "$peers" = 1 ]; then
      /usr/bin/python3 "$src/bench/peers/compare_allreduce.py" --world "$w" --op "$op" \
        --memcpy "$mc" "${args[@]}" -- "$glabel=$gloo" mpi="$mpi"
    else
      for v in "${opvariants[@]}"; do cat "$work/$op.${v%%=*}".$w.*; done
    fi
    echo
  done
done
echo "# every time: median over iterations of the slowest rank's; then median over $reps rounds"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores: a shared, noisy host"
