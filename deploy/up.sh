#!/usr/bin/env bash
# deploy/up.sh - the README's first command: a local ddp cluster on this machine, and the main
# job on it.
#
#   1. installs the build packages and dataset-fashion-mnist (apt-get, as root)
#   2. configures and builds ddpd, ddp-agent, ddp-worker and ddpctl into build/
#   3. starts ddpd (DDP_HOME=./.ddp: SQLite, tokens; logs in ./.ddp/logs/) and two agents,
#      node-a and node-b, with 2 slots each on loopback, in the background (pids in
#      ./.ddp/run/), and waits until both nodes are READY; the agents run every job as the
#      user who runs this script (--isolation single-user: one user's local cluster)
#   4. submits the main job: ddp-worker on Fashion-MNIST, 2 nodes x 2 processes
#   5. follows it with `ddpctl watch` to its end (the loss of every epoch), prints its status,
#      and leaves the cluster up; deploy/down.sh stops it.
#
# Running it again stops what the last run started (deploy/down.sh, which checks each pid
# file against the live process) and starts afresh on the same ./.ddp (jobs are kept).
#
# Settings (environment): DDP_HOME (./.ddp), DDP_PORT (8470), DDP_BUILD_DIR (build),
# DDP_EPOCHS (10), DDP_MODEL (mlp: the main job; cnn: the CNN on Fashion-MNIST; gpt: the GPT on
# Debian's fortunes, 1 epoch unless DDP_EPOCHS says), DDP_WORKER_ARGS (more ddp-worker arguments), DDP_WORKER_PORT_BASE (29500:
# node-a uses 500 ports from there, node-b the next 500), DDP_SKIP_APT=1, DDP_SKIP_BUILD=1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

case "${1:-}" in
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "up.sh: unknown argument '$1'" >&2; echo "usage: deploy/up.sh" >&2; exit 2 ;;
esac

export DDP_HOME=${DDP_HOME:-$ROOT/.ddp}
PORT=${DDP_PORT:-8470}
BUILD=${DDP_BUILD_DIR:-build}
case "$BUILD" in /*) BIN=$BUILD/bin ;; *) BIN=$ROOT/$BUILD/bin ;; esac
MODEL=${DDP_MODEL:-mlp}
case $MODEL in
  mlp) MODEL_ARGS=() JOB_NAME=fashion-mnist WHAT="an MLP on Fashion-MNIST" ;;
  cnn) MODEL_ARGS=(--model cnn:c32k5-p2-c64k5-p2-f1024-f10 --backend cpu) JOB_NAME=fashion-cnn
       WHAT="the CNN on Fashion-MNIST" ;;
  gpt) MODEL_ARGS=(--model gpt:4-4-128-64 --backend cpu --data fortunes --optimizer adamw
         --lr 0.001 --lr-scale none --warmup-steps 100 --clip-grad-norm 1.0 --batch-size 16
         --eval-every 500 --generate 300) JOB_NAME=fortunes-gpt
       WHAT="the GPT on the fortunes corpus" ;;
  *) echo "up.sh: DDP_MODEL=$MODEL: want mlp, cnn or gpt" >&2; exit 2 ;;
esac
[ "$MODEL" = gpt ] && DEFAULT_EPOCHS=1 || DEFAULT_EPOCHS=10
EPOCHS=${DDP_EPOCHS:-$DEFAULT_EPOCHS}
PORT_BASE=${DDP_WORKER_PORT_BASE:-29500}
read -r -a WORKER_ARGS <<<"${DDP_WORKER_ARGS:-}"
URL=http://127.0.0.1:$PORT
export DDP_SERVER=$URL
LOGS=$DDP_HOME/logs
RUN=$DDP_HOME/run

step() { echo; echo "== $*"; }
die() { echo "up.sh: $*" >&2; exit 1; }

# ---- 1. packages --------------------------------------------------------------------------
PACKAGES=(build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev
  libcurl4-openssl-dev libopenblas-dev libdnnl-dev zlib1g-dev nettle-dev libcmocka-dev
  dataset-fashion-mnist fortunes)
if [ "${DDP_SKIP_APT:-0}" != 1 ]; then
  step "installing packages (apt-get)"
  if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo);
  else die "not root and no sudo: install ${PACKAGES[*]} yourself, then DDP_SKIP_APT=1 $0"; fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q >/dev/null
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null
fi

# ---- 2. build -----------------------------------------------------------------------------
if [ "${DDP_SKIP_BUILD:-0}" != 1 ]; then
  step "building into $BUILD/"
  mkdir -p "$BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$BUILD/up-configure.log" 2>&1 ||
    { tail -30 "$BUILD/up-configure.log"; die "cmake configure failed (log: $BUILD/up-configure.log)"; }
  targets=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
  for t in ddpd ddp-agent ddp-worker ddpctl; do
    if ! grep -qE "(^|[ .])$t(:|$| )" <<<"$targets"; then
      case $t in
        ddp-worker) die "ddp-worker is not written yet (issue 4: trainer/main.c): there is no main job to run. ddpd, ddp-agent and ddpctl can be built with: cmake --build $BUILD --target ddpd ddp-agent ddpctl" ;;
        *) die "the $t target does not exist yet in this tree; up.sh cannot start the cluster" ;;
      esac
    fi
  done
  cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" \
    --target ddpd ddp-agent ddp-worker ddpctl >"$BUILD/up-build.log" 2>&1 ||
    { tail -40 "$BUILD/up-build.log"; die "build failed (log: $BUILD/up-build.log)"; }
fi
for b in ddpd ddp-agent ddp-worker ddpctl; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing (not built)"
done
CTL=$BIN/ddpctl

# ---- 3. cluster ---------------------------------------------------------------------------
mkdir -p "$DDP_HOME" "$LOGS" "$RUN"
if [ -n "$(ls -A "$RUN" 2>/dev/null)" ]; then
  step "stopping what the last run started"
  DDP_HOME=$DDP_HOME "$ROOT/deploy/down.sh"
fi
# Our processes are stopped now: anything that still answers on the port is someone else's.
busy=0
probe=$("$CTL" --server "$URL" nodes 2>&1) && busy=1
grep -q 'connection refused' <<<"$probe" || busy=1
[ "$busy" = 0 ] ||
  die "something not started by up.sh answers at $URL; stop it, or choose another port with DDP_PORT"

# start NAME LOGFILE ARGV...: runs ARGV in its own session in the background, logs appended
# to LOGFILE, and writes "PID START COMM" to $RUN/NAME.pid for down.sh (which signals the
# pid only while all three still match, so a reused pid is never hit).
start() {
  local name=$1 log=$2 comm s
  shift 2
  comm=$(basename "$1" | cut -c1-15)
  setsid "$@" >>"$log" 2>&1 </dev/null &
  local pid=$!
  # Until exec, /proc/PID/comm still names the shell or setsid: wait for the program.
  for _ in $(seq 250); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && break
    [ -d "/proc/$pid" ] || break
    sleep 0.02
  done
  s=$(cat "/proc/$pid/stat" 2>/dev/null) || s="x) ?"
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo "$pid ${20:-0} $comm" >"$RUN/$name.pid"
}

# fail_start WHAT LOG: the cluster did not come up; stop what runs and show the log.
fail_start() {
  echo "up.sh: $1; last lines of $2:" >&2
  tail -20 "$2" >&2 || true
  "$ROOT/deploy/down.sh" --quiet || true
  exit 1
}

step "starting ddpd on $URL (DDP_HOME=$DDP_HOME, logs in $LOGS/)"
start ddpd "$LOGS/ddpd.log" "$BIN/ddpd" --listen "127.0.0.1:$PORT" --node-timeout 5
ok=0
for _ in $(seq 150); do   # 30 s at most
  read -r dpid _ <"$RUN/ddpd.pid"
  [ -d "/proc/$dpid" ] || fail_start "ddpd exited at start" "$LOGS/ddpd.log"
  if [ -s "$DDP_HOME/user.token" ] && "$CTL" nodes >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.2
done
[ "$ok" = 1 ] || fail_start "ddpd did not answer within 30 s" "$LOGS/ddpd.log"

n=0
for node in node-a node-b; do
  lo=$((PORT_BASE + 500 * n))
  mkdir -p "$DDP_HOME/agents/$node"
  echo "   agent $node: 2 slots, worker ports $lo-$((lo + 499)), log $LOGS/agent-$node.log"
  start "agent-$node" "$LOGS/agent-$node.log" "$BIN/ddp-agent" --server "$URL" \
    --token-file "$DDP_HOME/agent.token" --name "$node" --address 127.0.0.1 --slots 2 \
    --port-range "$lo-$((lo + 499))" --work-dir "$DDP_HOME/agents/$node" \
    --isolation single-user
  n=$((n + 1))
done
ok=0
for _ in $(seq 150); do   # 30 s at most
  nodes=$("$CTL" nodes 2>/dev/null || true)
  if awk '$1=="node-a" && $3=="READY"{a=1} $1=="node-b" && $3=="READY"{b=1} END{exit !(a&&b)}' \
      <<<"$nodes"; then ok=1; break; fi
  for node in node-a node-b; do
    read -r apid _ <"$RUN/agent-$node.pid"
    [ -d "/proc/$apid" ] || fail_start "agent $node exited at start" "$LOGS/agent-$node.log"
  done
  sleep 0.2
done
[ "$ok" = 1 ] || fail_start "the nodes were not READY within 30 s" "$LOGS/ddpd.log"
"$CTL" nodes

# ---- 4. the main job ----------------------------------------------------------------------
step "submitting the main job: ddp-worker, $WHAT, 2 nodes x 2 processes, $EPOCHS epoch(s)"
JOB=$("$CTL" submit --parsable --name "$JOB_NAME" --nnodes 2 --nproc-per-node 2 -- \
  "$BIN/ddp-worker" ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} --epochs "$EPOCHS" \
  ${WORKER_ARGS[@]+"${WORKER_ARGS[@]}"})
echo "   job $JOB"

# ---- 5. follow it -------------------------------------------------------------------------
rel=${BIN#"$ROOT"/}
step "ddpctl watch $JOB"
rc=0
# Ctrl-C stops following only: ddpd, the agents and the job run in their own sessions.
trap 'echo; echo "up.sh: stopped following $JOB; it and the cluster keep running ($rel/ddpctl watch $JOB to follow again, deploy/down.sh to stop)"; exit 130' INT
"$CTL" watch "$JOB" || rc=$?
trap - INT
step "ddpctl status $JOB"
"$CTL" status "$JOB" || true

echo
echo "The cluster is still up (ddpd at $URL, nodes node-a and node-b). Use it from $ROOT:"
if [ "$PORT" != 8470 ]; then echo "  export DDP_SERVER=$URL"; fi
if [ "$DDP_HOME" != "$ROOT/.ddp" ]; then echo "  export DDP_HOME=$DDP_HOME"; fi
echo "  $rel/ddpctl list                 # jobs"
echo "  $rel/ddpctl logs $JOB --rank 0   # worker output"
echo "  $rel/ddpctl submit --nnodes 2 --nproc-per-node 2 -- $BIN/ddp-worker --epochs 3"
echo "ddpctl reads your token (user admin's) from $DDP_HOME/user.token; the dashboard at $URL/"
echo "asks for it once (cat $DDP_HOME/user.token). A teammate's own token:"
echo "  $rel/ddpctl users add alice      # writes alice.token (mode 0600)"
echo "Stop it with deploy/down.sh (deploy/down.sh --purge also removes $DDP_HOME)."
exit "$rc"
