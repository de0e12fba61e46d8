#!/usr/bin/env bash
# deploy/down.sh - stops the local cluster that deploy/up.sh started: the two agents first
# (their workers die with them), then ddpd. Each gets SIGTERM, then SIGKILL if it is still
# there after a bounded wait. Only processes whose pid file in $DDP_HOME/run/ still matches
# (same pid, same start time, same program) are signalled, so a stale pid file never hits an
# unrelated process that reuses the pid.
#
#   deploy/down.sh            stop; keep everything in $DDP_HOME (jobs, logs, tokens)
#   deploy/down.sh --purge    stop, then remove $DDP_HOME (the SQLite file, logs, tokens,
#                             the agents' work dirs and checkpoints)
#
# DDP_HOME defaults to ./.ddp at the repository root, as in up.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

purge=0
quiet=0
for a in "$@"; do
  case "$a" in
    --purge) purge=1 ;;
    --quiet) quiet=1 ;;
    -h|--help)
      sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    *) echo "down.sh: unknown argument '$a'" >&2
       echo "usage: deploy/down.sh [--purge]" >&2
       exit 2 ;;
  esac
done

HOME_DIR=${DDP_HOME:-$ROOT/.ddp}
RUN=$HOME_DIR/run
say() { [ "$quiet" = 1 ] || echo "down.sh: $*"; }

# Field 22 of /proc/PID/stat: the start time in clock ticks since boot. The command name
# (field 2) may hold spaces and parentheses, so cut after its last ')'.
start_time() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo "${20}"
}

# alive PID START COMM: whether PID is still the process the pid file describes.
alive() {
  local pid=$1 start=$2 comm=$3
  [ -d "/proc/$pid" ] || return 1
  [ "$(start_time "$pid")" = "$start" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
  # A zombie has exited already.
  ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# stop NAME TIMEOUT: stops the process of $RUN/NAME.pid ("PID START COMM").
stop() {
  local name=$1 timeout=$2 file=$RUN/$1.pid pid start comm
  [ -f "$file" ] || return 0
  read -r pid start comm <"$file" || true
  if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! alive "$pid" "$start" "$comm"; then
    say "$name is not running (stale pid file removed)"
    rm -f "$file"
    return 0
  fi
  say "stopping $name (pid $pid)"
  # up.sh starts each process as the leader of its own session and process group.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local waited=0
  while alive "$pid" "$start" "$comm" && [ "$waited" -lt $((timeout * 10)) ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  if alive "$pid" "$start" "$comm"; then
    say "$name did not stop within ${timeout}s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    waited=0
    while alive "$pid" "$start" "$comm" && [ "$waited" -lt 50 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if alive "$pid" "$start" "$comm"; then
      echo "down.sh: $name (pid $pid) survived SIGKILL" >&2
      return 1
    fi
  fi
  rm -f "$file"
}

status=0
if [ -d "$RUN" ]; then
  for f in "$RUN"/agent-*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    stop "$n" 20 || status=1
  done
  stop ddpd 10 || status=1
fi

if [ "$purge" = 1 ]; then
  if [ "$status" = 0 ]; then
    if [ -d "$HOME_DIR" ]; then
      rm -rf -- "$HOME_DIR"
      say "removed $HOME_DIR"
    fi
  else
    echo "down.sh: not purging $HOME_DIR: something did not stop" >&2
  fi
fi
[ "$status" = 0 ] && say "local cluster stopped"
exit "$status"
