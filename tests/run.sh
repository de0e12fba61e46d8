#!/usr/bin/env bash
# The README's test command: installs what the build and the tests need, builds every part
# with -Werror, checks the tree (banned functions, .clang-format, the layering rule: tests/banned.sh,
# format.sh, layering.sh), and runs all tests three ways:
#   1. plainly                         (build/)
#   2. under AddressSanitizer + UBSan  (build-asan/; tests labelled "heavy" are skipped there)
#   3. the libFuzzer targets, each for a bounded time, under ASan + UBSan (build-fuzz/, clang)
# Exits non-zero if anything fails. Set DDP_TEST_SKIP_APT=1 to skip the apt-get step,
# DDP_TEST_ONLY=plain|asan|fuzz to run one of the three, DDP_TEST_LONG=1 to include the tests
# labelled long (minutes of training: the CNN's accuracy run).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)

if [ "${DDP_TEST_SKIP_APT:-0}" != 1 ]; then
  echo "== installing build and test packages (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
    build-essential cmake pkg-config clang clang-format libclang-rt-14-dev \
    libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libcmocka-dev \
    libopenblas-dev libdnnl-dev zlib1g-dev nettle-dev dataset-fashion-mnist fortunes \
    python3 python3-jsonschema python3-yaml chromium curl openssl iproute2 procps psmisc sqlite3 \
    man-db groff-base >/dev/null
  # zsh for the install test's check of the zsh completion (apart: it skips, saying so,
  # where zsh cannot be installed).
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends zsh >/dev/null ||
    echo "note: zsh unavailable here; the install test skips the zsh completion"
  # systemd for systemd-analyze (deploy_recipes: verify and the security scores of the units).
  # Debian's package installs without systemd as PID 1 and starts nothing there: its scripts
  # skip what needs a running systemd. Apart, so that a failure costs only that check.
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends systemd \
    >/dev/null || echo "note: systemd unavailable here; deploy_recipes skips the unit checks"
  # PyTorch (with OpenBLAS) for the tests that run unmodified torch programs under the agents
  # (agent_torch). Apart, so that a machine where Debian has no python3-torch still runs the
  # rest; those tests then say they skip.
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends python3-torch \
    >/dev/null || echo "note: python3-torch unavailable here; agent_torch will skip"
  # Slurm and munge for slurm_recipe (deploy/slurm/ddp.sbatch on slurmctld and two slurmd on
  # loopback; the test starts its own daemons with its own config: the packages' services do
  # not start without systemd, and need not). Apart too: where they cannot be installed the
  # test says loudly that it skips.
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends slurm-wlm munge \
    >/dev/null || echo "note: slurm-wlm or munge unavailable here; slurm_recipe will skip"
  # libdqlite (with libraft) runs the real dqlite nodes of test_dqclient, the replicated store's
  # client against dqlite itself. Apart too: where it is missing, the configure step says
  # "libdqlite not found" and ctest lists test_dqclient as skipped.
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends libdqlite-dev \
    libraft-dev >/dev/null || echo "note: libdqlite-dev unavailable here; test_dqclient will skip"
fi

# promtool (Debian package prometheus) checks /metrics. Installing the package would also
# start a Prometheus server, so take the binary out of the .deb instead.
if ! command -v promtool >/dev/null; then
  tools=$PWD/build-tools
  if [ ! -x "$tools/usr/bin/promtool" ] && [ "${DDP_TEST_SKIP_APT:-0}" != 1 ]; then
    mkdir -p "$tools"
    (cd "$tools" && apt-get download -q prometheus >/dev/null 2>&1 &&
      dpkg -x prometheus_*.deb . && rm -f prometheus_*.deb) ||
      echo "note: promtool unavailable; /metrics is checked by the tests' own parser only"
  fi
  [ -x "$tools/usr/bin/promtool" ] && export PATH="$tools/usr/bin:$PATH"
fi

only=${DDP_TEST_ONLY:-all}
status=0

run_build() { # name, build dir, extra cmake args...
  local name=$1 dir=$2
  shift 2
  echo "== [$name] configure and build ($dir)"
  cmake -S . -B "$dir" -DDDP_WERROR=ON "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  grep -E '^-- ddp:' "$dir.configure.log" || true
  cmake --build "$dir" -j"$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
  [ "${PIPESTATUS[0]}" -eq 0 ]
}

run_tests() { # name, build dir, ctest args...
  local name=$1 dir=$2
  shift 2
  echo "== [$name] tests"
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j"$jobs" "$@")
}

mkdir -p build build-asan build-fuzz
if [ "$only" = all ] || [ "$only" = plain ]; then
  if run_build plain build; then
    bash tests/banned.sh || status=1
    bash tests/format.sh || status=1
    bash tests/layering.sh || status=1
    # label long (minutes of training, e.g. the CNN's accuracy run): only with DDP_TEST_LONG=1
    if [ "${DDP_TEST_LONG:-0}" = 1 ]; then
      run_tests plain build -LE fuzz || status=1
    else
      run_tests plain build -LE 'fuzz|long' || status=1
    fi
  else
    status=1
  fi
fi
if [ "$only" = all ] || [ "$only" = asan ]; then
  if run_build asan build-asan -DDDP_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      run_tests asan build-asan -LE 'heavy|fuzz' || status=1
  else
    status=1
  fi
fi
if [ "$only" = all ] || [ "$only" = fuzz ]; then
  if CC=clang run_build fuzz build-fuzz -DDDP_FUZZ=ON -DDDP_CUDA=OFF; then
    run_tests fuzz build-fuzz -L fuzz || status=1
  else
    status=1
  fi
fi

if [ $status -eq 0 ]; then echo "== all test runs passed"; else echo "== SOME TESTS FAILED"; fi
exit $status
