#!/usr/bin/env bash
# The layering rule of docs/architecture.md, checked:
#   trainer -> libddp (public headers only: "ddp/x.h") -> common;  server, agent, cli -> common.
# 1. Each part's #include "part/..." lines name only the parts it may use.
# 2. libddp and its tests build and pass in a copy of the tree without trainer/ (CUDA off).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
allowed() { # part -> the include prefixes it may use
  case $1 in
    common) echo "common" ;;
    server) echo "common server" ;;
    agent) echo "common agent" ;;
    cli) echo "common cli" ;;
    libddp) echo "common ddp libddp" ;;
    trainer) echo "common ddp trainer" ;;
  esac
}
for part in common server agent cli libddp trainer; do
  ok=$(allowed $part)
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
    prefix=${inc%%/*}
    [ "$prefix" = "$inc" ] && continue # a header beside the file
    if ! grep -qw -- "$prefix" <<<"$ok"; then
      echo "layering: $line (a $part file may include only: $ok)"
      status=1
    fi
  done < <(git ls-files "$part" | grep -E '\.(c|h|cu)$' | xargs -r grep -Hn '^[[:space:]]*#[[:space:]]*include "')
done
[ $status -eq 0 ] && echo "layering: every #include follows the rule"

# libddp without the trainer.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z | grep -zv '^trainer/' | xargs -0 cp --parents -t "$tmp" 2>/dev/null ||
  { echo "layering: cannot copy the tree"; exit 1; }
tests="test_env test_rdzv test_comm_cpu test_comm_shm test_sampler test_ckpt test_reducer test_resume"
if cmake -S "$tmp" -B "$tmp/build" -DDDP_CUDA=OFF -DDDP_WERROR=ON >"$tmp/configure.log" 2>&1 &&
  cmake --build "$tmp/build" -j"$(nproc)" --target ddp $tests >"$tmp/build.log" 2>&1; then
  regex="^($(tr ' ' '|' <<<"$tests"))\$"
  if (cd "$tmp/build" && ctest -R "$regex" --output-on-failure >"$tmp/ctest.log" 2>&1); then
    echo "layering: libddp and its $(wc -w <<<"$tests") test binaries build and pass without trainer/"
  else
    cat "$tmp/ctest.log"
    echo "layering: libddp's tests fail without trainer/"
    status=1
  fi
else
  tail -30 "$tmp/configure.log" "$tmp/build.log"
  echo "layering: libddp does not build without trainer/"
  status=1
fi
exit $status
