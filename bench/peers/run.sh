#!/usr/bin/env bash
# jobpact vs BullMQ vs bee-queue on one private redis-server (issue 8,
# "Speed, side by side in one run"): the same workloads through each, one
# worker process each, concurrency 10, then ONE table with the ratios.
#
#   bench/peers/run.sh                 20,000 no-op jobs (also with idempotency
#                                      and dedup keys, jobpact only), 5,000
#                                      fail-once jobs, bulk enqueue, and
#                                      enqueue->start latency (500 jobs 5 ms apart)
#   bench/peers/run.sh --quick         smaller counts, for a smoke run
#   bench/peers/run.sh --appendonly everysec|always|no
#                                      the server's persistence (default: no,
#                                      no AOF and no RDB snapshots)
#   bench/peers/run.sh --sweep         also jobpact no-op at appendonly no,
#                                      everysec and always (a fresh server each)
#   bench/peers/run.sh --bench PATH    run this jobpact_peer_bench instead of
#                                      building one (a saved binary of an
#                                      earlier commit: before/after back to back)
#
# Needs: the build (JOBPACT_WITH_REDIS=ON, JOBPACT_BUILD_BENCHMARKS=ON; built
# in $BUILD, default build/, which is configured first if it is new), Node 20 and
# npm (the peers come from package-lock.json with npm ci; they are measuring
# tools, never dependencies of jobpact), redis-server. The server listens on
# 127.0.0.1 only, keeps its files in a temporary directory, and is stopped
# by its PID on exit. Each workload runs after FLUSHDB, on a queue or
# namespace of its own.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../scripts/lib.sh"
source "$HERE/peers_lib.sh"

QUICK=0 SWEEP=0 AOF=no PREBUILT=
BUILD="${BUILD:-$JOBPACT_ROOT/build}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --sweep) SWEEP=1 ;;
    --appendonly) AOF="$2"; shift ;;
    --build-dir) BUILD="$2"; shift ;;
    --bench) PREBUILT="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--sweep] [--appendonly no|everysec|always] [--build-dir DIR] [--bench PATH]" >&2; exit 2 ;;
  esac
  shift
done
case "$AOF" in no|everysec|always) ;; *) echo "--appendonly: no, everysec or always" >&2; exit 2 ;; esac
peers_counts "$QUICK"
peers_prepare "$BUILD" "$PREBUILT" -DJOBPACT_WITH_REDIS=ON

WORK="$(mktemp -d "${TMPDIR:-/tmp}/jobpact-peers.XXXXXX")"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
cleanup() { stop_redis; rm -rf "$WORK"; }

# persistence MODE: sets the running server's AOF to MODE (CONFIG SET).
persistence() {
  local cli=(redis-cli -h 127.0.0.1 -p "$PORT")
  if [ "$1" = no ]; then
    "${cli[@]}" config set appendonly no >/dev/null
  else
    "${cli[@]}" config set appendfsync "$1" >/dev/null
    "${cli[@]}" config set appendonly yes >/dev/null
  fi
  "${cli[@]}" config set save '' >/dev/null
}

# server MODE: a fresh private server (lib.sh start_redis) set to MODE.
server() {
  stop_redis
  rm -rf "$WORK/server"
  start_redis "$WORK/server" >/dev/null
  trap cleanup EXIT
  URL="$JOBPACT_REDIS_URL"
  PORT="${URL##*:}"; PORT="${PORT%%/*}"
  persistence "$1"
}

collect() { grep '^RESULT ' | sed 's/^RESULT //' | tee -a "$RESULTS" >/dev/null; }

log "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(redis-server --version | cut -d' ' -f1-3); node $(node --version)"
START_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
server "$AOF"
log "Server: $URL, appendonly $AOF (save '' : no RDB snapshots)"
log "jobpact (JobRunner, workers 10, RedisBackend::bundle)"
"$BENCH" --url "$URL" --workers 10 "${COUNTS[@]}" | collect
log "BullMQ (Worker, concurrency 10)"
node "$HERE/bullmq_bench.js" --url "$URL" --concurrency 10 "${COUNTS[@]}" | collect
log "bee-queue (process(10, ...))"
node "$HERE/beequeue_bench.js" --url "$URL" --concurrency 10 "${COUNTS[@]}" | collect

if [ "$SWEEP" = 1 ]; then
  for mode in no everysec always; do
    server "$mode"
    log "jobpact no-op, appendonly $mode"
    label="appendonly yes, appendfsync $mode"
    [ "$mode" = no ] && label="appendonly no"
    "$BENCH" --url "$URL" --workers 10 --workloads noop "${COUNTS[@]}" --label "$label" | collect
  done
fi
END_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"

log "Results ($(date -u '+%Y-%m-%d %H:%M UTC'); load average $START_LOAD at start, $END_LOAD at end; appendonly $AOF)"
node "$HERE/table.js" "$RESULTS"
if [ -n "${PEERS_RESULTS_OUT:-}" ]; then cp "$RESULTS" "$PEERS_RESULTS_OUT"; fi
