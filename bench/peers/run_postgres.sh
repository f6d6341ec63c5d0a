#!/usr/bin/env bash
# jobpact vs graphile-worker vs pg-boss on one private PostgreSQL server
# (issue 9, "Speed, side by side in one run"): the same workloads through
# each, one worker process each, concurrency 10, stock durability (fsync
# on, synchronous_commit on), then ONE table with the ratios.
#
#   bench/peers/run_postgres.sh          20,000 no-op jobs (also with idempotency
#                                        and dedup keys, jobpact only), 5,000
#                                        fail-once jobs, bulk enqueue, and
#                                        enqueue->start latency (500 jobs 5 ms apart)
#   bench/peers/run_postgres.sh --quick  smaller counts, for a smoke run
#   bench/peers/run_postgres.sh --bench PATH
#                                        run this jobpact_peer_bench instead of
#                                        building one
#
# Needs: the build (JOBPACT_WITH_POSTGRES=ON, JOBPACT_BUILD_BENCHMARKS=ON;
# built in $BUILD, default build/, configured first if it is new), Node 20
# and npm (the peers come from package-lock.json with npm ci; they are
# measuring tools, never dependencies of jobpact), Debian's postgresql. The
# server (scripts/lib.sh start_postgres: initdb on a temporary directory, run
# as the postgres user) listens on 127.0.0.1 only and is stopped on exit.
# Each workload runs on a fresh schema of its own.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../scripts/lib.sh"
source "$HERE/peers_lib.sh"

QUICK=0 PREBUILT=
BUILD="${BUILD:-$JOBPACT_ROOT/build}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD="$2"; shift ;;
    --bench) PREBUILT="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--build-dir DIR] [--bench PATH]" >&2; exit 2 ;;
  esac
  shift
done
peers_counts "$QUICK"
peers_prepare "$BUILD" "$PREBUILT" -DJOBPACT_WITH_POSTGRES=ON

WORK="$(mktemp -d "${TMPDIR:-/tmp}/jobpact-peers-pg.XXXXXX")"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
# The server's own temporary directory: the postgres user must reach it
# (start_postgres hands it over), which it could not inside $WORK (0700).
PGDIR="$(mktemp -d "${TMPDIR:-/tmp}/jobpact-peers-pg-server.XXXXXX")"
cleanup() { stop_postgres; rm -rf "$WORK" "$PGDIR"; }
trap cleanup EXIT
start_postgres "$PGDIR" >/dev/null
URL="$JOBPACT_POSTGRES_URL"
PID="$(head -1 "$PGDIR/data/postmaster.pid")"
collect() { grep '^RESULT ' | sed 's/^RESULT //' | tee -a "$RESULTS" >/dev/null; }
SETTINGS="$(psql "$URL" -XAtqc "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings
  WHERE name IN ('fsync', 'synchronous_commit', 'wal_sync_method', 'shared_buffers')")"

log "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(psql "$URL" -XAtqc 'SHOW server_version'); node $(node --version)"
START_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
log "Server: $URL (postmaster $PID): $SETTINGS"
log "jobpact (JobRunner, workers 10, OpenBackend(postgres://...))"
"$BENCH" --url "$URL" --pg-pid "$PID" --workers 10 "${COUNTS[@]}" | collect
log "graphile-worker (run, concurrency 10)"
node "$HERE/graphile_bench.js" --url "$URL" --pg-pid "$PID" --concurrency 10 "${COUNTS[@]}" | collect
log "pg-boss (10 x work, batchSize 100, polling every 0.5 s)"
node "$HERE/pgboss_bench.js" --url "$URL" --pg-pid "$PID" --concurrency 10 "${COUNTS[@]}" | collect
END_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"

log "Results ($(date -u '+%Y-%m-%d %H:%M UTC'); load average $START_LOAD at start, $END_LOAD at end; $SETTINGS)"
node "$HERE/table.js" "$RESULTS"
if [ -n "${PEERS_RESULTS_OUT:-}" ]; then cp "$RESULTS" "$PEERS_RESULTS_OUT"; fi
