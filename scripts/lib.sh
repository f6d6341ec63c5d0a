# Shared set-up for scripts/demo and scripts/test. Sourced, not run.
# Idempotent: installs only missing Debian packages, reconfigures only when
# the build directory is new, and lets the build tool skip up-to-date work.
set -euo pipefail

JOBPACT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBPACT_JOBS="${JOBPACT_JOBS:-$(nproc)}"

# Debian 12 packages the build, the tests and the servers need; cpp-httplib
# for the HTTP endpoint and the dashboard, which scripts/demo serves too.
JOBPACT_PACKAGES=(
  g++ cmake ninja-build pkg-config
  libfmt-dev libspdlog-dev nlohmann-json3-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libcli11-dev libcpp-httplib-dev
  redis-server libhiredis-dev
  postgresql libpq-dev
)
# What only the test suite needs: promtool (checks the metrics and the alert
# rules), valgrind (the runner's instructions per job: scripts/instructions)
# and chromium (the dashboard's browser test, tests/http/browser; large, and
# driven by playwright-core from npm, which downloads no browser of its own).
# libsimdjson-dev is a measuring tool: bench/json_check_bench sets the JSON
# pre-scan beside it (never linked into the library).
JOBPACT_TEST_PACKAGES=(prometheus libcpp-httplib-dev valgrind chromium libsimdjson-dev)
# What scripts/fuzz needs: clang with libFuzzer and the sanitizer runtimes
# (Debian 12 ships libFuzzer in libclang-rt-14-dev), and python3 for the
# seed extraction.
JOBPACT_FUZZ_PACKAGES=(clang clang-14 libclang-rt-14-dev python3)

# Each line says how long since the outermost script started (scripts/test
# runs scripts/fuzz: one clock for both), so a slow step shows in CI's log.
export JOBPACT_T0="${JOBPACT_T0:-$(date +%s)}"
log() {
  local t=$(($(date +%s) - JOBPACT_T0))
  printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((t / 60)) $((t % 60)) "$*"
}
die() { log "$*" >&2; exit 1; }

ensure_packages() {
  local missing=()
  for p in "${JOBPACT_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "Debian packages: all present"
    return
  fi
  log "Installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# ensure_browser_test: Node.js with npm (the machine's, else Debian's
# nodejs and npm), and tests/http/browser's node_modules as its
# package-lock.json pins them (npm ci; again only when the lock changed).
ensure_browser_test() {
  if ! command -v npm >/dev/null 2>&1; then
    ensure_packages nodejs npm
  fi
  local dir="${JOBPACT_ROOT}/tests/http/browser"
  if [ ! -f "$dir/node_modules/.package-lock.json" ] ||
     [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    log "npm ci in tests/http/browser (playwright-core, pinned; it downloads no browser)"
    (cd "$dir" && npm ci --no-audit --no-fund)
  fi
}

# configure_and_build BUILD_DIR [cmake args...]
configure_and_build() {
  local dir="$1"; shift
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    log "Configuring $dir"
    cmake -S "$JOBPACT_ROOT" -B "$dir" -G Ninja "$@"
  else
    cmake "$dir" "$@" >/dev/null
  fi
  log "Building $dir"
  cmake --build "$dir" -j "$JOBPACT_JOBS"
}

# build_tsan BUILD_DIR: configures and builds the ThreadSanitizer build
# (RelWithDebInfo with line tables only, every backend, the tests): the one
# scripts/test runs the suite in, and scripts/tsan_repeat reuses.
build_tsan() {
  configure_and_build "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DJOBPACT_SANITIZE=thread \
    -DJOBPACT_BUILD_TESTS=ON -DJOBPACT_BUILD_EXAMPLES=OFF -DJOBPACT_WITH_SQLITE=ON \
    -DJOBPACT_WITH_REDIS=ON -DJOBPACT_WITH_POSTGRES=ON -DJOBPACT_WITH_HTTP=ON
}

# configure_fuzz_build DIR: the clang build of scripts/fuzz (libFuzzer +
# ASan + UBSan on everything), shared with scripts/thread_safety (which
# compiles its library targets) and with scripts/test's AddressSanitizer +
# UBSan run of the test suite (its test programs): one clang build of the
# library serves all three. Configured once; a build directory made before
# the HTTP endpoint, the conformance suite or the tests were part of it
# gains them here (a reconfigure of an existing directory is a matter of
# seconds). scripts/fuzz and scripts/thread_safety build only their own
# targets, so the tests cost them nothing.
configure_fuzz_build() {
  local dir="$1"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    # -O1 and line tables only: what libFuzzer's docs suggest (OSS-Fuzz
    # builds the same way), about half the build time of -O2 -g, and stack
    # traces still name every line.
    log "Configuring $dir (clang, libFuzzer + ASan + UBSan)"
    CC=clang CXX=clang++ cmake -S "$JOBPACT_ROOT" -B "$dir" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DJOBPACT_FUZZ=ON -DJOBPACT_BUILD_TESTS=ON \
      -DJOBPACT_BUILD_EXAMPLES=OFF -DJOBPACT_INSTALL=OFF -DJOBPACT_WITH_SQLITE=ON \
      -DJOBPACT_WITH_REDIS=ON -DJOBPACT_WITH_POSTGRES=ON -DJOBPACT_WITH_HTTP=ON \
      -DJOBPACT_BUILD_CONTRACT=ON
  elif ! grep -q '^JOBPACT_WITH_HTTP:BOOL=ON' "$dir/CMakeCache.txt" ||
       ! grep -q '^JOBPACT_BUILD_CONTRACT:BOOL=ON' "$dir/CMakeCache.txt" ||
       ! grep -q '^JOBPACT_BUILD_TESTS:BOOL=ON' "$dir/CMakeCache.txt"; then
    log "Reconfiguring $dir with the HTTP endpoint, the conformance suite and the tests"
    cmake "$dir" -DJOBPACT_WITH_HTTP=ON -DJOBPACT_BUILD_CONTRACT=ON -DJOBPACT_BUILD_TESTS=ON >/dev/null
  fi
}

# start_redis DIR: starts a private redis-server for the tests on a free
# 127.0.0.1 port, with its own data directory DIR (created), durable like a
# production setting (appendonly yes, appendfsync everysec), its PID in
# DIR/redis.pid. Exports JOBPACT_REDIS_URL and JOBPACT_REDIS_PID; installs
# an EXIT trap that stops it, so it goes even when a later step fails.
start_redis() {
  local dir="$1" attempt port i
  mkdir -p "$dir"
  for attempt in 1 2 3 4 5; do
    # A port nothing listens on (a refused connect); the server may still
    # lose a race for it, hence the attempts.
    port=$((20000 + RANDOM % 40000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize no \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
      --save '' --appendonly yes --appendfsync everysec >/dev/null 2>&1 &
    JOBPACT_REDIS_PID=$!
    trap stop_redis EXIT
    for i in $(seq 1 100); do
      kill -0 "$JOBPACT_REDIS_PID" 2>/dev/null || break
      if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
        export JOBPACT_REDIS_URL="redis://127.0.0.1:${port}/0"
        export JOBPACT_REDIS_PID JOBPACT_REDIS_DIR="$dir"
        log "Redis test server: $JOBPACT_REDIS_URL (PID $JOBPACT_REDIS_PID, data in $dir)"
        return 0
      fi
      sleep 0.05
    done
    stop_redis
  done
  echo "redis-server did not start; its log ($dir/redis.log):" >&2
  cat "$dir/redis.log" >&2 || true
  return 1
}

# stop_redis: stops the server start_redis started, by its PID (never by
# name: other redis-servers on the machine are not ours).
stop_redis() {
  if [ -n "${JOBPACT_REDIS_PID:-}" ] && kill -0 "$JOBPACT_REDIS_PID" 2>/dev/null; then
    kill "$JOBPACT_REDIS_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do
      kill -0 "$JOBPACT_REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$JOBPACT_REDIS_PID" 2>/dev/null || true
    log "Redis test server stopped (PID $JOBPACT_REDIS_PID)"
  fi
  JOBPACT_REDIS_PID=""
}

# The directory of PostgreSQL's server programs (initdb, pg_ctl, postgres):
# the newest Debian /usr/lib/postgresql/<version>/bin, else PATH's.
postgres_bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; else dirname "$(command -v pg_ctl)"; fi
}

# Runs a command as the server's user: PostgreSQL refuses to run as root,
# so as root it runs as `postgres`; otherwise as ourselves.
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# start_postgres DIR: starts a private PostgreSQL cluster for the tests in
# DIR (created, owned by the server's user, who must be able to reach it:
# as root, give it a directory of its own such as a fresh mktemp -d): initdb with trust
# authentication (local test use only), listening on 127.0.0.1 on a free
# port, its Unix socket inside DIR, stock durability (fsync on). Exports
# JOBPACT_POSTGRES_URL (database jobpact_test) and JOBPACT_POSTGRES_DIR.
# Installs no trap (it would replace the caller's): set one that calls
# stop_postgres BEFORE calling this, so the cluster goes even when a later
# step (or this function, after the server started) fails.
start_postgres() {
  local dir="$1" bin attempt port i
  bin="$(postgres_bindir)"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  as_postgres "$bin/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    if as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300" start \
        >/dev/null 2>&1; then
      JOBPACT_POSTGRES_DIR="$dir"
      for i in $(seq 1 100); do
        if as_postgres "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtc \
            "CREATE DATABASE jobpact_test" >/dev/null 2>&1; then
          export JOBPACT_POSTGRES_URL="postgres://postgres@127.0.0.1:${port}/jobpact_test"
          export JOBPACT_POSTGRES_DIR
          log "PostgreSQL test server: $JOBPACT_POSTGRES_URL (data in $dir/data)"
          return 0
        fi
        sleep 0.05
      done
      stop_postgres
    fi
  done
  echo "PostgreSQL did not start; its log ($dir/server.log):" >&2
  cat "$dir/server.log" >&2 || true
  return 1
}

# stop_postgres: stops the cluster start_postgres started, by its data
# directory (pg_ctl signals the postmaster whose PID that directory
# records; never by name: other PostgreSQL servers on the machine are not
# ours).
stop_postgres() {
  if [ -n "${JOBPACT_POSTGRES_DIR:-}" ] && [ -f "$JOBPACT_POSTGRES_DIR/data/postmaster.pid" ]; then
    as_postgres "$(postgres_bindir)/pg_ctl" -D "$JOBPACT_POSTGRES_DIR/data" -m fast -w stop \
      >/dev/null 2>&1 || true
    log "PostgreSQL test server stopped (data in $JOBPACT_POSTGRES_DIR/data)"
  fi
  JOBPACT_POSTGRES_DIR=""
}
