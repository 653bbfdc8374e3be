#!/usr/bin/env bash
# The upgrade test (ctest label `upgrade`): this tree's binaries against the newest release's.
#
#   tests/upgrade/upgrade_test.sh BUILD_DIR
#
# 1. Finds the newest release tag (v*, by version order), or without tags (a clone made without
#    them) the newest release tests/upgrade/releases names. Its commit missing (a shallow
#    clone): exits 77, which ctest shows as skipped, saying so.
# 2. Builds that release's granary_master, granary_node and granary (the CLI) in a git worktree
#    under BUILD_DIR/upgrade/ (only those three targets, with BUILD_DIR's compile flags and no
#    tests, so ccache makes it quick; kept until the tag moves).
# 3. Runs tests/upgrade/upgrade_cluster.py on loopback with both sets of binaries: mixed clusters
#    (an old node under a new master and client; a new node under an old master), then a rolling
#    upgrade of a running old cluster, one process at a time, under a reader and a writer.
#
# While this tree speaks the same protocol as the release, the mixed runs are same-version runs
# (the script says so); they become cross-version runs with the next protocol bump.
# Environment: GRANARY_UPGRADE_JOBS (build jobs, default nproc).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "$1" && pwd)
new_bin="$build/bin"
for b in granary_master granary_node granary; do
  [[ -x "$new_bin/$b" ]] || { echo "upgrade: $new_bin/$b is not built" >&2; exit 1; }
done

if ! git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  echo "upgrade: SKIPPED: $root is not a git checkout, so there is no release to build" >&2
  exit 77
fi
tag=$(git -C "$root" tag --list 'v[0-9]*' --sort=-v:refname | head -n 1)
if [[ -n "$tag" ]]; then
  commit=$(git -C "$root" rev-parse --verify --quiet "$tag^{commit}" || true)
else
  # A clone without tags (CI's, or one made without --tags) still has the release's commit:
  # tests/upgrade/releases names it.
  read -r tag commit < <(grep -v '^#' "$root/tests/upgrade/releases" | sort -V -r -k1,1 | head -n 1)
  if [[ -z "$tag" ]]; then
    echo "upgrade: SKIPPED: git has no release tag (v*) here and tests/upgrade/releases names" \
         "none; nothing to upgrade from" >&2
    exit 77
  fi
  echo "upgrade: no release tag here; $tag is commit $commit (tests/upgrade/releases)"
  commit=$(git -C "$root" rev-parse --verify --quiet "$commit^{commit}" || true)
fi
if [[ -z "$commit" ]]; then
  echo "upgrade: SKIPPED: tag $tag names a commit this clone lacks (shallow)" >&2
  exit 77
fi

dir="$build/upgrade"
src="$dir/src-$tag"
old_build="$dir/build-$tag"
old_bin="$old_build/bin"
mkdir -p "$dir"
# The compile flags of this build, so that ccache finds the objects the release shares with it.
same_flags=()
for var in GRANARY_WERROR GRANARY_WITH_CUDA GRANARY_SANITIZER CMAKE_BUILD_TYPE; do
  value=$(sed -n "s/^$var:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null || true)
  if [[ -n "$value" ]]; then same_flags+=("-D$var=$value"); fi
done
if [[ "$(cat "$dir/built-$tag" 2>/dev/null)" != "$commit" ]] || [[ ! -x "$old_bin/granary_node" ]]; then
  echo "upgrade: building $tag ($commit) in $src"
  git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"
  git -C "$root" worktree prune
  git -C "$root" worktree add --detach "$src" "$commit" >/dev/null
  GRANARY_BUILD_DIR="$old_build" GRANARY_JOBS="${GRANARY_UPGRADE_JOBS:-$(nproc)}" \
    GRANARY_BUILD_TARGETS="granary_master granary_node granary" \
    bash "$src/scripts/build.sh" -DGRANARY_BUILD_TESTS=OFF -DGRANARY_BUILD_BENCH=OFF \
    -DGRANARY_BUILD_PYTHON=OFF "${same_flags[@]}"
  echo "$commit" >"$dir/built-$tag"
fi

version() {  # the protocol version a tree's frame.h names
  sed -n 's/^inline constexpr uint16_t kProtocolVersion = \([0-9]*\);.*/\1/p' "$1/src/proto/frame.h"
}
old_v=$(version "$src")
new_v=$(version "$root")
if [[ "$old_v" == "$new_v" ]]; then
  echo "upgrade: $tag speaks protocol $old_v, as this tree does: the mixed runs are same-version"
else
  echo "upgrade: $tag speaks protocol $old_v, this tree $new_v"
fi
exec python3 "$root/tests/upgrade/upgrade_cluster.py" --old "$old_bin" --new "$new_bin" \
  --work "$dir/run" --old_name "$tag (protocol $old_v)" --new_name "this tree (protocol $new_v)"
