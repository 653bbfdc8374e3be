#!/usr/bin/env bash
# Installs every Debian package that Granary's build, tests and demo need. Idempotent and
# non-interactive: packages already present are not touched, and apt-get update runs only when
# something is missing. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git curl ca-certificates
  libucx-dev ucx-utils libibverbs-dev rdma-core
  libabsl-dev libgflags-dev libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libssl-dev
  libgtest-dev libgmock-dev libjemalloc-dev liburing-dev
  clang clang-format libclang-rt-14-dev ccache
  etcd-server etcd-client
  pybind11-dev python3-dev python3-pytest python3-numpy python3-torch python3-yaml
  python3-matplotlib
  chromium
  mkdocs mkdocs-material
)
# The dashboard's browser test (tests/browser) runs node and npm. A node from elsewhere (such as
# NodeSource's nodejs, which carries its own npm) is kept: Debian's npm package would conflict
# with it.
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi
# Extra packages for bench/compare.sh (reference tools and the plot).
if [[ "${GRANARY_SETUP_BENCH:-0}" == "1" ]]; then
  PACKAGES+=(redis-server redis-tools gnuplot-nox)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts etcd as a service on install; the tests run their own.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
echo "setup: done"
