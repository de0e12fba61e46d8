#!/usr/bin/env bash
# bench/models: the CNN (samples/s) and the GPT (tokens/s) of ddp-worker against the same
# models in PyTorch DDP, W = 1 and 2, one thread per rank, the same BLAS (Debian's OpenBLAS:
# bench/peers/setup.sh checks it), median of 3 paired runs, peak memory per rank against the
# floor, and the share of the GPT's communication hidden behind its backward
# (side_by_side.py says how each figure is made).
# Usage: bench/models/run.sh [BUILD_DIR]   (default build; needs BUILD_DIR/bin/ddp-worker)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-$repo/build}
[ -x "$build/bin/ddp-worker" ] || { echo "no $build/bin/ddp-worker: build first" >&2; exit 1; }
"$repo/bench/peers/setup.sh" "$build/peers" >/dev/null
# The same OpenBLAS kernels for every peer: ddp-worker chooses them where OpenBLAS falls back
# to its generic ones (trainer/blas_core.h); PyTorch's OpenBLAS gets the same choice.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$build/bin/ddp-worker" --blas-core)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The GPT's text: the fortunes corpus (Debian package fortunes), 1 MB and 20 kB to validate.
/usr/bin/python3 - "$work/text" <<'PY'
import os, sys
d = "/usr/share/games/fortunes"
names = sorted(n for n in os.listdir(d) if "." not in n and os.path.isfile(os.path.join(d, n)))
data = b"".join(open(os.path.join(d, n), "rb").read() for n in names)
open(sys.argv[1], "wb").write(data[:1000000])
open(sys.argv[1] + ".valid", "wb").write(data[-20000:])
PY
exec /usr/bin/python3 "$here/side_by_side.py" --worker "$build/bin/ddp-worker" \
  --text "$work/text" --reps "${REPS:-3}"
