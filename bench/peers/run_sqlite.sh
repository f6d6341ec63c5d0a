#!/usr/bin/env bash
# jobpact vs plainjob on SQLite (issue 12, "SQLite side by side with
# plainjob"): the same workloads through each, one process each, each
# workload on a fresh SQLite file in one temporary directory (one file
# system), WAL, the same synchronous setting on both sides, then ONE table
# with the ratios.
#
#   bench/peers/run_sqlite.sh          20,000 no-op jobs enqueued in chunks of
#                                      1,000 (the bulk enqueue figure) then
#                                      drained; jobpact also with idempotency
#                                      and dedup keys, and with those and a
#                                      lock key (the full contract; plainjob
#                                      has none of the three)
#   bench/peers/run_sqlite.sh --quick  2,000 jobs, for a smoke run
#   bench/peers/run_sqlite.sh --synchronous normal|full
#                                      both sides' PRAGMA synchronous (default
#                                      normal: jobpact's default, and what
#                                      plainjob's defineQueue sets; full: an
#                                      fsync of the WAL per commit on both)
#   bench/peers/run_sqlite.sh --bench PATH
#                                      run this jobpact_peer_bench instead of
#                                      building one
#
# jobpact: one JobRunner, workers 10, OpenBackend(sqlite:///...) (WAL,
# SqliteOptions::synchronous from the URL). plainjob 0.0.14 on better-sqlite3
# (which bundles its own SQLite): one worker on one connection, as its
# README sets it up (plainjob_bench.js says why one).
#
# Needs: the build (JOBPACT_WITH_SQLITE=ON, JOBPACT_BUILD_BENCHMARKS=ON;
# built in $BUILD, default build/, configured first if it is new), Node 20
# and npm (the peers come from package-lock.json with npm ci; better-sqlite3
# compiles from source against /usr/include/node, see peers_lib.sh; they are
# measuring tools, never dependencies of jobpact). The files live in a
# temporary directory under ${TMPDIR:-/tmp}, removed on exit.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../../scripts/lib.sh"
source "$HERE/peers_lib.sh"

QUICK=0 PREBUILT= SYNC=normal
BUILD="${BUILD:-$JOBPACT_ROOT/build}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --synchronous) SYNC="$2"; shift ;;
    --build-dir) BUILD="$2"; shift ;;
    --bench) PREBUILT="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--synchronous normal|full] [--build-dir DIR] [--bench PATH]" >&2; exit 2 ;;
  esac
  shift
done
case "$SYNC" in normal|full) ;; *) echo "--synchronous: normal or full" >&2; exit 2 ;; esac
peers_counts "$QUICK"
peers_prepare "$BUILD" "$PREBUILT" -DJOBPACT_WITH_SQLITE=ON

WORK="$(mktemp -d "${TMPDIR:-/tmp}/jobpact-peers-sqlite.XXXXXX")"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
trap 'rm -rf "$WORK"' EXIT
collect() { grep '^RESULT ' | sed 's/^RESULT //' | tee -a "$RESULTS" >/dev/null; }

SQLITE_JOBPACT="$(dpkg-query -W -f='${Version}' libsqlite3-0 2>/dev/null)"
SQLITE_PLAINJOB="$(cd "$HERE" && node -p "require('better-sqlite3')(':memory:').prepare('SELECT sqlite_version() AS v').get().v")"
VERSIONS="plainjob $(cd "$HERE" && node -p "require('plainjob/package.json').version"), better-sqlite3 $(cd "$HERE" && node -p "require('better-sqlite3/package.json').version") (SQLite $SQLITE_PLAINJOB, bundled); jobpact: Debian's libsqlite3-0 ${SQLITE_JOBPACT:-?}"
log "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); node $(node --version); $(df -T "$WORK" | awk 'NR == 2 {print $2}') at $WORK"
log "Versions: $VERSIONS"
START_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
log "jobpact (JobRunner, workers 10, OpenBackend(sqlite:///...?synchronous=$SYNC): WAL, synchronous=${SYNC^^})"
"$BENCH" --url "sqlite://$WORK/jobpact.db?synchronous=$SYNC" --workloads noop,idem,full --workers 10 "${COUNTS[@]}" | collect
log "plainjob (defineQueue + 1 x defineWorker on better-sqlite3: WAL, synchronous=${SYNC^^})"
PJ_SYNC=()
[ "$SYNC" = full ] && PJ_SYNC=(--synchronous full)
node "$HERE/plainjob_bench.js" --url "sqlite://$WORK/plainjob.db" --concurrency 1 "${PJ_SYNC[@]}" "${COUNTS[@]}" | collect
END_LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"

log "Results ($(date -u '+%Y-%m-%d %H:%M UTC'); load average $START_LOAD at start, $END_LOAD at end; both sides WAL, synchronous=${SYNC^^}; $VERSIONS)"
node "$HERE/table.js" "$RESULTS"
if [ -n "${PEERS_RESULTS_OUT:-}" ]; then cp "$RESULTS" "$PEERS_RESULTS_OUT"; fi
