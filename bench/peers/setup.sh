#!/usr/bin/env bash
# bench/peers/setup.sh: installs the benchmarks' peers when missing and builds the MPI one.
#
#   bench/peers/setup.sh [OUT_DIR]     (default build/peers; prints OUT_DIR on stdout)
#
# Peers (Debian packages, never pip; Debian's /usr/bin/python3):
#   python3-torch          PyTorch 1.13: torch.distributed (gloo), DDP, torchrun
#   libopenblas0-pthread   so PyTorch's BLAS is OpenBLAS like ours (without it Debian's torch
#                          falls back to the reference BLAS, ~15x slower on an MLP)
#   openmpi-bin libopenmpi-dev   mpirun, mpicc (the MPI_Allreduce peer)
#   dataset-fashion-mnist  the main job's data
#   fortunes               the GPT's text (bench/models)
# Then builds OUT_DIR/mpi_allreduce from bench/peers/mpi_allreduce.c with mpicc (not with
# our CMake: Open MPI is a peer, not a dependency), and checks that torch really loads
# OpenBLAS at run time (exit 1 if not: the comparison would be unfair).
# Progress goes to stderr; a failing step exits non-zero naming it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/build/peers}
py=/usr/bin/python3

need=()
for p in python3-torch libopenblas0-pthread openmpi-bin libopenmpi-dev dataset-fashion-mnist fortunes; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}" >&2
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { "${sudo[@]}" apt-get update >&2 &&
      "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi

mkdir -p "$out"
if [ ! -x "$out/mpi_allreduce" ] || [ "$here/mpi_allreduce.c" -nt "$out/mpi_allreduce" ]; then
  echo "== mpicc bench/peers/mpi_allreduce.c -> $out/mpi_allreduce" >&2
  mpicc -std=c11 -O2 -Wall -Wextra -Wshadow -Werror -o "$out/mpi_allreduce" \
    "$here/mpi_allreduce.c"
fi

# The BLAS torch really loads (torch.__config__.show() says BLAS_INFO=generic: Debian's torch
# links libblas.so.3, which the alternatives system points at OpenBLAS or the reference BLAS).
blas=$("$py" "$here/blas_info.py")
echo "$blas" >"$out/torch_blas.txt"
case $blas in
  *openblas*) ;;
  *) echo "setup: torch does not use OpenBLAS ($blas): the comparison would be unfair" >&2
     exit 1 ;;
esac
echo "$out"
