#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU (CUDA toolkit and NCCL under
# /usr/local/cuda): builds with the GPU path switched on, runs the GPU tests, trains
# Fashion-MNIST on the GPU and on the CPU with the same seed and compares, times both, and
# prints a summary. Meant to finish in under 5 minutes. Without a GPU it says so and exits 0
# having checked nothing (it claims nothing).
#
#   bash tests/gpu/check.sh            # build-gpu/ in the repository
# Env: DDP_GPU_EPOCHS (default 10), DDP_TEST_SKIP_APT=1 to skip apt-get.
set -uo pipefail
cd "$(dirname "$0")/../.."
t_start=$(date +%s)
epochs=${DDP_GPU_EPOCHS:-10}
summary=()
fail=0
note() { summary+=("$1"); echo "== $1"; }

if [ "${DDP_TEST_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -q && apt-get install -y -q --no-install-recommends build-essential cmake \
      pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev \
      libcmocka-dev libopenblas-dev zlib1g-dev dataset-fashion-mnist; } >/tmp/ddp-gpu-apt.log 2>&1 ||
    echo "apt-get failed (see /tmp/ddp-gpu-apt.log); going on with what is installed"
fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no GPU on this machine (nvidia-smi finds none): nothing was checked"
  exit 0
fi
nvidia-smi -L

cmake -S . -B build-gpu -DDDP_CUDA=ON -DDDP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
  >build-gpu.configure.log 2>&1 || { cat build-gpu.configure.log; exit 1; }
if cmake --build build-gpu -j"$(nproc)" >build-gpu.build.log 2>&1; then
  note "build: ok ($(grep -c . build-gpu.build.log) lines of build log)"
else
  tail -40 build-gpu.build.log
  echo "build failed"
  exit 1
fi

if (cd build-gpu && ctest -L gpu --output-on-failure); then
  note "GPU unit tests (ctest -L gpu): passed"
else
  note "GPU unit tests (ctest -L gpu): FAILED"
  fail=1
fi
(cd build-gpu && ctest -L gpu -V 2>/dev/null | grep -E 'relative difference|loss cpu' | sed 's/^[0-9]*: /   /')

bin=build-gpu/bin/ddp-worker
run_train() { # backend, log file
  local start end
  start=$(date +%s.%N)
  DDP_LOG_LEVEL=warn "$bin" --backend "$1" --epochs "$epochs" --checkpoint-dir "" >"$2" 2>&1
  local rc=$?
  end=$(date +%s.%N)
  echo "$rc $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')"
}
read -r rc_g t_g < <(run_train nccl /tmp/ddp-gpu-train.log)
read -r rc_c t_c < <(run_train cpu /tmp/ddp-cpu-train.log)
acc_g=$(grep -oE 'test acc [0-9.]+' /tmp/ddp-gpu-train.log | tail -1 | awk '{print $3}')
acc_c=$(grep -oE 'test acc [0-9.]+' /tmp/ddp-cpu-train.log | tail -1 | awk '{print $3}')
sps_g=$(grep -oE '[0-9,]+ samples/s' /tmp/ddp-gpu-train.log | tail -1)
sps_c=$(grep -oE '[0-9,]+ samples/s' /tmp/ddp-cpu-train.log | tail -1)
echo "-- GPU training log:"; cat /tmp/ddp-gpu-train.log
echo "-- CPU training log:"; cat /tmp/ddp-cpu-train.log
if [ "$rc_g" = 0 ] && [ "$rc_c" = 0 ] && [ -n "$acc_g" ] && [ -n "$acc_c" ] &&
   awk -v a="$acc_g" -v b="$acc_c" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005 && a >= 0.88) }'; then
  note "Fashion-MNIST, $epochs epochs, 1 rank: GPU acc $acc_g vs CPU acc $acc_c (|diff| <= 0.005, >= 0.88): ok"
else
  note "Fashion-MNIST, $epochs epochs, 1 rank: GPU rc=$rc_g acc=$acc_g vs CPU rc=$rc_c acc=$acc_c: FAILED"
  fail=1
fi
note "throughput (last epoch): GPU $sps_g, CPU $sps_c; wall: GPU ${t_g}s, CPU ${t_c}s"

if [ -x build-gpu/bin/ddp-worker ]; then
  # The large MLP, where the GPU matters: synthetic data, 2 epochs.
  start=$(date +%s.%N)
  DDP_LOG_LEVEL=warn "$bin" --backend nccl --model mlp:1024-4096-4096-10 \
    --data synthetic:32768:1024:10 --epochs 2 --batch-size 256 --checkpoint-dir "" \
    >/tmp/ddp-gpu-large.log 2>&1
  rc=$?
  note "large MLP 1024-4096-4096-10 on GPU (rc $rc): $(grep -oE '[0-9,]+ samples/s' /tmp/ddp-gpu-large.log | tail -1)"
  [ $rc -eq 0 ] || fail=1
fi

echo
echo "==== GPU check summary ($(($(date +%s) - t_start)) s) ===="
printf '%s\n' "${summary[@]}"
[ $fail -eq 0 ] && echo "GPU check: PASSED" || echo "GPU check: FAILED"
exit $fail
