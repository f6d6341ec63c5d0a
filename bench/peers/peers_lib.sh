# Shared by run.sh, run_postgres.sh and run_sqlite.sh. Sourced, not run
# (after scripts/lib.sh).

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
  peers_npm_ci
}

# peers_npm_ci: installs the peers from package-lock.json (npm ci), unless
# node_modules already holds that lock file's install. better-sqlite3
# (plainjob's driver, run_sqlite.sh) is compiled from source against the
# installed Node's headers (/usr/include/node; .npmrc beside this file says
# the same for a bare npm ci): its prebuilt binary would be downloaded from
# outside the package registry. That compile takes minutes on 2 cores, so it
# runs niced, JOBPACT_JOBS jobs at most, and only when the lock file changed.
peers_npm_ci() {
  local dir stamp want
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  stamp="$dir/node_modules/.jobpact-npm-ci"
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1) node $(node --version)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "bench/peers/node_modules is package-lock.json's install (npm ci skipped)"
    return
  fi
  log "npm ci (bench/peers/package-lock.json; better-sqlite3 compiles from source)"
  (cd "$dir" && npm_config_nodedir=/usr npm_config_build_from_source=true JOBS="$JOBPACT_JOBS" \
    npm_config_jobs="$JOBPACT_JOBS" nice npm ci --no-audit --no-fund --loglevel=error) || exit 1
  echo "$want" >"$stamp"
}
