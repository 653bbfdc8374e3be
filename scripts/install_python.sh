#!/usr/bin/env bash
# Builds the Python module and installs the `granary` package for Debian's /usr/bin/python3:
# `cmake --install <build> --component python` into the dist-packages directory that python3
# has on sys.path under /usr/local (/usr/local/lib/python3.X/dist-packages), so that
# `python3 -c "import granary"` works with no PYTHONPATH. demo.sh and test.sh call it.
#
# GRANARY_INSTALL_MOONCAKE_SHIM=1 also installs the opt-in `mooncake` shim package, which makes
# `from mooncake.store import MooncakeDistributedStore` return Granary's class. It shadows a real
# Mooncake install, so it is never installed unless asked.
# Environment: GRANARY_BUILD_DIR (build), GRANARY_JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
PYTHON=/usr/bin/python3

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  bash scripts/build.sh
fi
# The target list is read whole before it is searched: `ninja ... | grep -q` under pipefail
# fails at random when grep exits early and ninja dies of SIGPIPE.
targets=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null || true)
if ! grep -q '^granary_python:' <<<"$targets"; then
  echo "install_python: $BUILD_DIR has no Python module (GRANARY_BUILD_PYTHON is OFF, or" \
    "pybind11-dev / python3-dev are missing: run scripts/setup.sh and reconfigure)" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target granary_python granary_python_files

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO cmake --install "$BUILD_DIR" --component python >/dev/null
if [[ "${GRANARY_INSTALL_MOONCAKE_SHIM:-0}" == "1" ]]; then
  $SUDO cmake --install "$BUILD_DIR" --component mooncake_shim >/dev/null
fi
# The installed package, not the build tree's: run from / with no PYTHONPATH.
where=$(cd / && env -u PYTHONPATH "$PYTHON" -c "import granary; print(granary.__file__)")
echo "install_python: granary installed for $PYTHON at $(dirname "$where")"
if [[ "${GRANARY_INSTALL_MOONCAKE_SHIM:-0}" == "1" ]]; then
  shim=$(cd / && env -u PYTHONPATH "$PYTHON" -c "import mooncake; print(mooncake.__file__)")
  echo "install_python: mooncake shim installed at $(dirname "$shim")"
fi
