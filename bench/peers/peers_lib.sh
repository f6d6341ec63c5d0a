# Shared by run.sh and run_postgres.sh. Sourced, not run (after
# scripts/lib.sh).

# peers_counts QUICK: sets COUNTS, the workloads' sizes.
peers_counts() {
  if [ "$1" = 1 ]; then
    COUNTS=(--jobs 2000 --fail-jobs 500 --latency-jobs 100)
  else
    COUNTS=(--jobs 20000 --fail-jobs 5000 --latency-jobs 500)
  fi
}

# peers_prepare BUILD PREBUILT BACKEND_OPTION: sets BENCH to jobpact's side
# (PREBUILT when given, else jobpact_peer_bench built in BUILD with
# BACKEND_OPTION, e.g. -DJOBPACT_WITH_REDIS=ON; BUILD is configured first if
# it is new), then installs the peers from package-lock.json.
peers_prepare() {
  local build="$1" prebuilt="$2" backend="$3"
  BENCH="$build/bench/peers/jobpact_peer_bench"
  if [ -n "$prebuilt" ]; then
    [ -x "$prebuilt" ] || { echo "--bench: $prebuilt is not an executable" >&2; exit 2; }
    BENCH="$prebuilt"
    log "Using $BENCH (not built)"
  elif [ -f "$build/CMakeCache.txt" ]; then
    log "Building jobpact_peer_bench in $build"
    cmake "$build" -DJOBPACT_BUILD_BENCHMARKS=ON "$backend" >/dev/null
    cmake --build "$build" --target jobpact_peer_bench -j "$JOBPACT_JOBS"
  else
    configure_and_build "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJOBPACT_BUILD_BENCHMARKS=ON \
      "$backend" -DJOBPACT_BUILD_TESTS=OFF
  fi
  log "npm ci (bench/peers/package-lock.json)"
  (cd "$(dirname "${BASH_SOURCE[0]}")" && npm ci --no-audit --no-fund --loglevel=error)
}
