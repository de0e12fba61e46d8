#!/usr/bin/env bash
# Refuses functions we never use in our C: unbounded or error-blind ones.
set -uo pipefail
cd "$(dirname "$0")/.."
banned='\b(atoi|atol|atoll|atof|sprintf|vsprintf|strcpy|strcat|strtok|gets|strncpy|strncat|tmpnam|mktemp)[[:space:]]*\('
hits=$(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null | xargs -r grep -nE "$banned" | grep -v 'banned-ok' || true)
if [ -n "$hits" ]; then
  echo "banned functions used (see tests/banned.sh):"
  echo "$hits"
  exit 1
fi
echo "banned functions: none used"
