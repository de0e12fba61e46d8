#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU: builds the GPU path (or takes a
# prebuilt bundle), runs the GPU tests, checks that two ranks on one GPU are refused, trains
# Fashion-MNIST on the GPU and on the CPU with the same seed and compares, times the large
# MLP on both, optionally runs the unit test under compute-sanitizer, and prints a summary.
# Meant to finish in under 5 minutes on 16 cores; every step has its own time limit, so a
# hang costs that step, not the machine's lease.
#
#   bash tests/gpu/check.sh                          # on the GPU machine: build in build-gpu/
#   bash tests/gpu/check.sh --bundle gpu-bundle.tar.xz
#       on a CPU machine that builds the GPU path (CUDA + NCCL, the build packages): the
#       binaries, the non-system libraries they need (OpenBLAS, cmocka, ...), Fashion-MNIST
#       and the hashes of the sources they were built from, for a GPU machine that cannot
#       build (no network, no -dev packages). About 45 MB.
#   DDP_GPU_BUNDLE=gpu-bundle.tar.xz bash tests/gpu/check.sh
#       on the GPU machine: builds in place when it can, else runs the bundle's binaries
#       (refused when the tree's sources differ from the bundle's).
#
# Env: DDP_GPU_EPOCHS (10), DDP_TEST_SKIP_APT=1 (no apt-get), DDP_GPU_SANITIZE=0 (skip
# compute-sanitizer), DDP_GPU_LOG_DIR (logs; /tmp/ddp-gpu-check), DDP_GPU_PREBUILT=1 (take the
# bundle even where a build would work), DDP_GPU_JOBS (build jobs; nproc), DDP_GPU_BUDGET_S
# (420: steps not yet started by then are skipped and count as failed).
# Exit: 0 every check passed; 1 a check failed; 2 nothing could be built or run (missing
# tools, libraries or NCCL: the message says which); 77 no GPU here (nothing was checked).
# A GPU test that reports itself skipped on a GPU machine counts as failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
t_start=$(date +%s)
epochs=${DDP_GPU_EPOCHS:-10}
logs=${DDP_GPU_LOG_DIR:-/tmp/ddp-gpu-check}
cores=$(nproc 2>/dev/null || echo 4)
jobs=${DDP_GPU_JOBS:-$cores}
summary=()
fail=0
note() { summary+=("$1"); echo "== $1"; }
elapsed() { echo $(($(date +%s) - t_start)); }
mkdir -p "$logs"

# Where CUDA, cuBLAS and NCCL may live, in order. pip's nvidia-nccl-cu13 (PyTorch's) counts.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
pip_nccl_dir() {
  command -v python3 >/dev/null || return 0
  python3 - <<'PY' 2>/dev/null
import importlib.util
spec = importlib.util.find_spec("nvidia.nccl")
if spec and spec.submodule_search_locations:
    print(list(spec.submodule_search_locations)[0])
PY
}
lib_dirs() {
  local d
  for d in "$cuda_home/lib64" "$cuda_home/lib" "$cuda_home/targets/x86_64-linux/lib" \
    /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64; do
    [ -d "$d" ] && echo "$d"
  done
  local p
  p=$(pip_nccl_dir)
  [ -n "$p" ] && [ -d "$p/lib" ] && echo "$p/lib"
}
find_nccl() { # sets nccl_inc, nccl_lib (empty when not found)
  nccl_inc="" nccl_lib=""
  local d p
  p=$(pip_nccl_dir)
  for d in "$cuda_home/include" /usr/include ${p:+"$p/include"}; do
    if [ -f "$d/nccl.h" ]; then nccl_inc=$d; break; fi
  done
  for d in $(lib_dirs); do
    for f in "$d/libnccl.so" "$d/libnccl.so.2"; do
      if [ -e "$f" ]; then nccl_lib=$f; break 2; fi
    done
  done
}
# Adds to LD_LIBRARY_PATH the folders that hold what ldd cannot find for the given files.
resolve_libs() {
  local f missing m d
  for f in "$@"; do
    missing=$(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}')
    for m in $missing; do
      for d in $(lib_dirs); do
        if [ -e "$d/$m" ]; then
          export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          break
        fi
      done
    done
  done
  local left=""
  for f in "$@"; do
    left+=$(ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ {printf "%s (needed by %s) ", $1, f}')
  done
  if [ -n "$left" ]; then
    echo "cannot find: $left"
    return 1
  fi
}

# ---- --bundle: on the build machine -----------------------------------------------------
if [ "${1:-}" = "--bundle" ]; then
  out=${2:?usage: check.sh --bundle FILE.tar.xz}
  case $out in /*) ;; *) out=$root/$out ;; esac
  bdir=build-gpu-bundle
  echo "== building the GPU bundle in $bdir/ ($jobs jobs)"
  find_nccl
  cmake -S . -B "$bdir" -DDDP_CUDA=ON -DDDP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
    ${nccl_inc:+-DDDP_NCCL_INCLUDE="$nccl_inc"} ${nccl_lib:+-DDDP_NCCL_LIB="$nccl_lib"} \
    >"$bdir.configure.log" 2>&1 || { cat "$bdir.configure.log"; exit 2; }
  cmake --build "$bdir" -j"$jobs" --target ddp-worker test_gpu_model >"$bdir.build.log" 2>&1 ||
    { tail -40 "$bdir.build.log"; exit 2; }
  stage=$(mktemp -d)
  b=$stage/ddp-gpu-bundle
  mkdir -p "$b/bin" "$b/lib" "$b/tests" "$b/runtime"
  cp "$bdir/bin/ddp-worker" "$b/bin/"
  cp "$bdir/lib/libddpgpu.so" "$bdir/lib/libddptrainergpu.so" "$b/lib/"
  cp "$bdir/tests/test_gpu_model" "$b/tests/"
  # The libraries they need beyond glibc, the compiler's runtime and CUDA/NCCL (those the GPU
  # machine has, in versions that match its driver).
  for f in "$b/bin/ddp-worker" "$b/tests/test_gpu_model"; do
    ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    grep -vE '/lib(cuda|cudart|cublas|cublasLt|nccl)\.so' | while read -r l; do
      cp -L "$l" "$b/runtime/"
    done
  if [ -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p "$b/data/fashion-mnist"
    cp /usr/share/datasets/fashion-mnist/*.gz "$b/data/fashion-mnist/"
  else
    echo "note: no Fashion-MNIST here (dataset-fashion-mnist): the bundle carries none"
  fi
  # What the binaries were built from, to refuse a bundle that does not match the tree.
  git ls-files -z -- libddp trainer common tests/unit/test_gpu_model.c CMakeLists.txt cmake |
    xargs -0 sha256sum >"$b/SOURCES.sha256"
  git rev-parse HEAD >"$b/COMMIT" 2>/dev/null || true
  tar -C "$stage" -cf - ddp-gpu-bundle | xz -T0 -6 >"$out" || exit 2
  rm -rf "$stage"
  echo "bundle: $out ($(du -h "$out" | cut -f1)); on the GPU machine:"
  echo "  DDP_GPU_BUNDLE=<that file> bash tests/gpu/check.sh"
  exit 0
fi

# ---- is there a GPU? ----------------------------------------------------------------------
gpu_seen=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu_seen=1; fi
if compgen -G '/dev/nvidia[0-9]*' >/dev/null; then gpu_seen=1; fi
if [ $gpu_seen = 0 ]; then
  echo "SKIPPED: no GPU on this machine (no nvidia-smi listing, no /dev/nvidia<N>): nothing was checked"
  exit 77
fi
echo "== machine"
nvidia-smi -L 2>&1 || echo "(nvidia-smi unavailable; /dev/nvidia* present)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
"$cuda_home/bin/nvcc" --version 2>/dev/null | tail -2
echo "cores: $cores; cmake: $(cmake --version 2>/dev/null | head -1)"

# ---- build here, or take the bundle --------------------------------------------------------
missing_build=()
check_build_deps() {
  missing_build=()
  local c m
  for c in cmake cc make; do command -v $c >/dev/null || missing_build+=("command $c"); done
  [ -x "$cuda_home/bin/nvcc" ] || missing_build+=("nvcc ($cuda_home/bin/nvcc)")
  if command -v pkg-config >/dev/null; then
    for m in libmicrohttpd jansson sqlite3 libcurl openblas zlib nettle cmocka; do
      pkg-config --exists $m 2>/dev/null || missing_build+=("pkg-config module $m")
    done
  else
    missing_build+=("command pkg-config")
  fi
  find_nccl
  [ -n "$nccl_inc" ] || missing_build+=("nccl.h")
  [ -n "$nccl_lib" ] || missing_build+=("libnccl.so")
}
check_build_deps
if [ ${#missing_build[@]} -gt 0 ] && [ "${DDP_TEST_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null; then
  echo "== missing for a build here: ${missing_build[*]}; trying apt-get (bounded: 3 min)"
  export DEBIAN_FRONTEND=noninteractive
  { timeout 90 apt-get -o Acquire::http::Timeout=10 -o Acquire::Retries=0 update -q &&
    timeout 90 apt-get install -y -q --no-install-recommends build-essential cmake pkg-config \
      libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libcmocka-dev \
      libopenblas-dev libdnnl-dev zlib1g-dev nettle-dev dataset-fashion-mnist; } >"$logs/apt.log" 2>&1 ||
    echo "apt-get failed (no network?) (see $logs/apt.log); going on with what is here"
  check_build_deps
fi

bundle=${DDP_GPU_BUNDLE:-}
bundle_dir=""
if [ -n "$bundle" ]; then
  [ -f "$bundle" ] || { echo "DDP_GPU_BUNDLE=$bundle: no such file"; exit 2; }
  bundle_dir=$root/build-gpu-bundle-run
  rm -rf "$bundle_dir" && mkdir -p "$bundle_dir"
  tar -C "$bundle_dir" -xJf "$bundle" || { echo "cannot unpack $bundle"; exit 2; }
  bundle_dir=$bundle_dir/ddp-gpu-bundle
fi

if [ ${#missing_build[@]} -eq 0 ] && [ "${DDP_GPU_PREBUILT:-0}" != 1 ]; then
  mode=build
  bdir=build-gpu
  echo "== building in $bdir/ ($jobs jobs; NCCL: $nccl_lib)"
  if ! cmake -S . -B "$bdir" -DDDP_CUDA=ON -DDDP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
      -DDDP_NCCL_INCLUDE="$nccl_inc" -DDDP_NCCL_LIB="$nccl_lib" >"$logs/configure.log" 2>&1; then
    cat "$logs/configure.log"
    echo "configure failed"
    exit 2
  fi
  if cmake --build "$bdir" -j"$jobs" --target ddp-worker test_gpu_model >"$logs/build.log" 2>&1; then
    note "build: ok in $(elapsed) s (Release, -Werror, $(grep -c 'warning' "$logs/build.log") warning lines)"
  else
    tail -40 "$logs/build.log"
    echo "build failed"
    exit 2
  fi
  bin=$root/$bdir/bin
  tbin=$root/$bdir/tests
  glib=$root/$bdir/lib
elif [ -n "$bundle_dir" ]; then
  mode=bundle
  echo "== no build here (missing: ${missing_build[*]:-none, DDP_GPU_PREBUILT=1}): using the bundle"
  if ! (cd "$root" && sha256sum -c --quiet "$bundle_dir/SOURCES.sha256" >"$logs/bundle-sources.log" 2>&1); then
    head -20 "$logs/bundle-sources.log"
    echo "the bundle was built from other sources than this tree (above): rebuild it with"
    echo "  bash tests/gpu/check.sh --bundle FILE.tar.xz   (on the build machine, this tree)"
    exit 2
  fi
  note "build: prebuilt bundle (commit $(cat "$bundle_dir/COMMIT" 2>/dev/null || echo ?), sources match the tree)"
  bin=$bundle_dir/bin
  tbin=$bundle_dir/tests
  glib=$bundle_dir/lib
  export LD_LIBRARY_PATH="$bundle_dir/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "cannot build here, missing: ${missing_build[*]}"
  echo "and no prebuilt bundle given. On a machine that builds the GPU path (this project's CPU"
  echo "machines do), run:  bash tests/gpu/check.sh --bundle gpu-bundle.tar.xz"
  echo "then bring that file here and run:  DDP_GPU_BUNDLE=gpu-bundle.tar.xz bash tests/gpu/check.sh"
  exit 2
fi

# The CUDA/NCCL libraries libddpgpu.so (libddp's runtime and NCCL) and libddptrainergpu.so (the
# MLP's kernels, cuBLAS) need: found through the loader's path, or added to it.
if ! resolve_libs "$glib/libddpgpu.so" "$glib/libddptrainergpu.so" "$bin/ddp-worker" \
  "$tbin/test_gpu_model"; then
  echo "the GPU library cannot load here (above); LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  exit 2
fi
echo "libddpgpu.so resolves: $(ldd "$glib/libddpgpu.so" | awk '/nccl|cudart/ {printf "%s ", $3}')"
echo "libddptrainergpu.so resolves: $(ldd "$glib/libddptrainergpu.so" | awk '/cublas.so|cudart/ {printf "%s ", $3}')"

# Fashion-MNIST: the system's, else the bundle's.
data_note=""
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${DDP_FASHION_MNIST_DIR:-}" ]; then
  if [ -n "$bundle_dir" ] && [ -d "$bundle_dir/data/fashion-mnist" ]; then
    export DDP_FASHION_MNIST_DIR=$bundle_dir/data/fashion-mnist
    data_note=" (data from the bundle)"
  else
    data_note=" (NO Fashion-MNIST on this machine: those checks fail)"
  fi
fi

export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# One machine: NCCL's bootstrap on the loopback interface (a VM's other interfaces may lead
# nowhere).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# The driver's libcuda.so.1, which cudart opens at run time: where containers mount it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib; do
    if [ -e "$d/libcuda.so.1" ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":$d:"* ]]; then
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
    fi
  done
fi
export DDP_GPU_REQUIRED=1

# ---- the GPU tests (a skip is a failure here) ------------------------------------------------
# Each step has its own limit, and once the whole check has run DDP_GPU_BUDGET_S (420 s), the
# steps left are not started (reported, and counted as failed): a lent machine's minutes are few.
budget=${DDP_GPU_BUDGET_S:-420}
run_step() { # name, time limit (s), log, command...: prints "rc seconds"
  local name=$1 limit=$2 log=$3 start rc
  shift 3
  if [ "$(elapsed)" -gt "$budget" ]; then
    echo "$name: not started: the check is over its ${budget} s budget" >"$log"
    echo "125 0"
    return
  fi
  start=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  echo "$rc $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
}
verdict() { # rc, limit: "ok" / "TIMED OUT" / "SKIPPED (counts as failed)" / "FAILED (rc N)"
  case $1 in
    0) echo ok ;;
    124 | 137) echo "TIMED OUT after $2 s" ;;
    77) echo "SKIPPED on a GPU machine: counts as FAILED" ;;
    125) echo "NOT RUN (over the ${budget} s budget)" ;;
    *) echo "FAILED (rc $1)" ;;
  esac
}

read -r rc t < <(run_step unit 120 "$logs/test_gpu_model.log" "$tbin/test_gpu_model")
echo "-- test_gpu_model:"; cat "$logs/test_gpu_model.log"
note "test_gpu_model (GPU MLP vs CPU MLP, NCCL world 1): $(verdict "$rc" 120) in ${t}s"
[ "$rc" = 0 ] || fail=1
grep -E 'relative difference|loss cpu|hits cpu' "$logs/test_gpu_model.log" | sed 's/^/   /' | head -40

read -r rc t < <(run_step worker 180 "$logs/test_gpu_worker.log" env DDP_BIN="$bin" DDP_SRC="$root" \
  python3 tests/integration/test_gpu_worker.py)
echo "-- test_gpu_worker.py:"; cat "$logs/test_gpu_worker.log"
note "gpu_worker (ddp-worker nccl vs cpu: 20 steps, 1 epoch)$data_note: $(verdict "$rc" 180) in ${t}s"
[ "$rc" = 0 ] || fail=1

# ---- two ranks on one GPU are refused, clearly, with the device exit code (8) -----------------
port=$((29000 + RANDOM % 2000))
pids=()
for r in 0 1; do
  env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CUDA_VISIBLE_DEVICES=0 \
    timeout --kill-after=5 60 "$bin/ddp-worker" --backend nccl --data synthetic:256:16:4 \
    --model mlp:16-8-4 --epochs 1 --checkpoint-dir "" --timeout 30 >"$logs/two-ranks-$r.log" 2>&1 &
  pids+=($!)
done
rcs=()
for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
# Both ranks see the duplicate and exit 8; a rank that loses the race with the other's exit may
# report the store instead (non-zero, not a hang): accepted when the other said why.
two_ok=1
grep -q "two ranks on one GPU" "$logs"/two-ranks-*.log || two_ok=0
[ "${rcs[0]}" = 8 ] || [ "${rcs[1]}" = 8 ] || two_ok=0
for x in "${rcs[@]}"; do case $x in 0 | 124 | 137) two_ok=0 ;; esac; done
if [ $two_ok = 1 ]; then
  note "two ranks on one GPU: refused with the message, exit codes ${rcs[*]} (8 = device): ok"
else
  note "two ranks on one GPU: exit codes ${rcs[*]} (want 8, no 0 or timeout), message $(grep -q 'two ranks on one GPU' "$logs"/two-ranks-*.log && echo seen || echo missing): FAILED"
  tail -n 5 "$logs"/two-ranks-*.log
  fail=1
fi

# ---- Fashion-MNIST on GPU and CPU, same seed -----------------------------------------------------
train() { # backend, log, limit, extra args...
  local be=$1 log=$2 limit=$3
  shift 3
  run_step "train-$be" "$limit" "$log" env DDP_LOG_LEVEL=warn "$bin/ddp-worker" --backend "$be" \
    --epochs "$epochs" --checkpoint-dir "" "$@"
}
read -r rc_g t_g < <(train nccl "$logs/fashion-gpu.log" 120)
read -r rc_c t_c < <(train cpu "$logs/fashion-cpu.log" 120)
last() { grep -oE "$1" "$2" | tail -1; }
acc_g=$(last 'test acc [0-9.]+' "$logs/fashion-gpu.log" | awk '{print $3}')
acc_c=$(last 'test acc [0-9.]+' "$logs/fashion-cpu.log" | awk '{print $3}')
sps_g=$(last '[0-9,]+ samples/s' "$logs/fashion-gpu.log")
sps_c=$(last '[0-9,]+ samples/s' "$logs/fashion-cpu.log")
echo "-- Fashion-MNIST on the GPU:"; cat "$logs/fashion-gpu.log"
echo "-- Fashion-MNIST on the CPU:"; cat "$logs/fashion-cpu.log"
if [ "$rc_g" = 0 ] && [ "$rc_c" = 0 ] && [ -n "$acc_g" ] && [ -n "$acc_c" ] &&
  awk -v a="$acc_g" -v b="$acc_c" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005 && a >= 0.88) }'; then
  note "Fashion-MNIST, $epochs epochs, 1 rank$data_note: GPU acc $acc_g vs CPU acc $acc_c (|diff| <= 0.005, >= 0.88): ok"
else
  note "Fashion-MNIST, $epochs epochs, 1 rank$data_note: GPU $(verdict "$rc_g" 120) acc=${acc_g:-none} vs CPU $(verdict "$rc_c" 120) acc=${acc_c:-none}: FAILED"
  fail=1
fi
note "Fashion-MNIST throughput (last epoch, batch 32): GPU ${sps_g:-?}, CPU (1 thread) ${sps_c:-?}; wall: GPU ${t_g}s, CPU ${t_c}s"

# ---- the large MLP, where the GPU matters ----------------------------------------------------------
read -r rc t < <(run_step large-gpu 90 "$logs/large-gpu.log" env DDP_LOG_LEVEL=warn "$bin/ddp-worker" \
  --backend nccl --model mlp:1024-4096-4096-10 --data synthetic:32768:1024:10 --epochs 2 \
  --batch-size 256 --checkpoint-dir "")
sps_lg=$(last '[0-9,]+ samples/s' "$logs/large-gpu.log")
[ "$rc" = 0 ] || { tail -20 "$logs/large-gpu.log"; fail=1; }
read -r rc2 t2 < <(run_step large-cpu 90 "$logs/large-cpu.log" env DDP_LOG_LEVEL=warn \
  OMP_NUM_THREADS="$cores" "$bin/ddp-worker" --backend cpu --model mlp:1024-4096-4096-10 \
  --data synthetic:4096:1024:10 --epochs 1 --batch-size 256 --checkpoint-dir "")
sps_lc=$(last '[0-9,]+ samples/s' "$logs/large-cpu.log")
note "large MLP 1024-4096-4096-10, batch 256: GPU ${sps_lg:-?} ($(verdict "$rc" 90), last of 2 epochs); CPU $cores threads ${sps_lc:-?} ($(verdict "$rc2" 90), 1 epoch of 4096, ${t2}s)"

# ---- the unit test's kernels under compute-sanitizer (memcheck) ---------------------------------
san=$(command -v compute-sanitizer || echo "$cuda_home/bin/compute-sanitizer")
if [ "${DDP_GPU_SANITIZE:-1}" != 0 ] && [ -x "$san" ]; then
  read -r rc t < <(run_step sanitizer 90 "$logs/sanitizer.log" env DDP_GPU_TEST_FILTER='*odd*' \
    "$san" --tool memcheck --error-exitcode 99 "$tbin/test_gpu_model")
  if [ "$rc" = 0 ]; then
    note "compute-sanitizer memcheck on the odd-shape test: ok, $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$logs/sanitizer.log" | tail -1) (${t}s)"
  elif grep -qiE 'not supported|unable to|failed to initialize' "$logs/sanitizer.log" && [ "$rc" != 99 ]; then
    note "compute-sanitizer: unavailable on this machine (not counted): $(grep -iE 'not supported|unable to|failed to initialize' "$logs/sanitizer.log" | head -1)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$rc" = 125 ]; then
    note "compute-sanitizer: timed out after 90 s or not started (not counted)"
  else
    note "compute-sanitizer memcheck on the odd-shape test: FAILED (rc $rc)"
    grep -E '=========' "$logs/sanitizer.log" | head -30
    fail=1
  fi
fi

echo
echo "==== GPU check summary ($(elapsed) s, mode: $mode, logs in $logs) ===="
printf '%s\n' "${summary[@]}"
if [ $fail -eq 0 ]; then echo "GPU check: PASSED"; else echo "GPU check: FAILED"; fi
exit $fail
