#!/usr/bin/env bash
# Fails when a tracked C or CUDA file drifts from .clang-format (docs/style.md). The pinned
# formatter is Debian 12's clang-format 14 (tests/run.sh installs it); another version may
# format differently, so this check names the version it ran. To fix a drift:
#   git ls-files '*.c' '*.h' '*.cu' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null; then
  echo "format check: $fmt not found (apt-get install clang-format)"
  exit 1
fi
files=$(git ls-files '*.c' '*.h' '*.cu')
bad=()
for f in $files; do
  if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format check ($("$fmt" --version | head -1)): ${#bad[@]} file(s) drift from .clang-format:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: clang-format -i <file> (see tests/format.sh)"
  exit 1
fi
echo "format check: $(echo "$files" | wc -w) files match .clang-format"
