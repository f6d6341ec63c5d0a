# Shared set-up for scripts/demo and scripts/test. Sourced, not run.
# Idempotent: installs only missing Debian packages, reconfigures only when
# the build directory is new, and lets the build tool skip up-to-date work.
set -euo pipefail

JOBPACT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBPACT_JOBS="${JOBPACT_JOBS:-$(nproc)}"

# Debian 12 packages the build, the tests and the servers need.
JOBPACT_PACKAGES=(
  g++ cmake ninja-build pkg-config
  libfmt-dev libspdlog-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libcli11-dev
)

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

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
