#!/usr/bin/env bash
# A/B of the control-plane codec: bench/codec_bench.cc built against the proto sources of REF
# (checked out in a temporary git worktree) and against this checkout's, with the same compiler
# and flags (CMake's RelWithDebInfo: -O2 -g -DNDEBUG), then run in turns, ROUNDS times each.
# Prints each message's fastest encode and decode on either side and the ratio new/old, then
# the geometric mean and the worst ratio.
#
#   bench/codec_ab.sh REF [ROUNDS]        e.g. bench/codec_ab.sh HEAD~1 3
#
# Environment: CXX (g++), GRANARY_CODEC_BENCH_ARGS (passed on, e.g. "--ms 10 --reps 3").
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 REF [ROUNDS]" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ref=$1
rounds=${2:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/granary-codec-ab.XXXXXX")
cleanup() {
  git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$work/old" "$ref" >/dev/null 2>&1

# build TREE OUT: the bench against TREE's proto and common sources. This checkout's src/ comes
# second on the include path, for message_table.h when TREE predates it.
build() {
  local tree=$1 out=$2 srcs=()
  for f in proto/codec.cc proto/frame.cc proto/messages.cc proto/msg_type.cc \
      common/error_reason.cc common/tier_preference.cc; do
    srcs+=("$tree/src/$f")
  done
  # shellcheck disable=SC2046
  "${CXX:-g++}" -std=c++20 -O2 -g -DNDEBUG -I"$tree/src" -I"$root/src" -I"$tree/include" \
    -I"$root" "$root/bench/codec_bench.cc" "${srcs[@]}" \
    $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_cord) \
    -o "$out"
}
echo "codec_ab: building against $ref ($(git -C "$root" rev-parse --short "$ref")) and this checkout" >&2
build "$work/old" "$work/bench_old"
build "$root" "$work/bench_new"

read -r -a args <<<"${GRANARY_CODEC_BENCH_ARGS:-}"
for ((i = 1; i <= rounds; ++i)); do
  echo "codec_ab: round $i of $rounds" >&2
  "$work/bench_old" "${args[@]}" | tail -n +2 | sed 's/^/old /' >>"$work/results"
  "$work/bench_new" "${args[@]}" | tail -n +2 | sed 's/^/new /' >>"$work/results"
done

python3 - "$work/results" <<'PY'
import math, sys
best = {}
order = []
for line in open(sys.argv[1]):
    side, rest = line.split(' ', 1)
    parts = rest.rsplit(None, 3)
    name, enc, dec = parts[0].strip(), float(parts[1]), float(parts[2])
    if name not in order:
        order.append(name)
    b = best.setdefault((side, name), [enc, dec])
    b[0], b[1] = min(b[0], enc), min(b[1], dec)
print(f"{'message':28} {'enc old':>9} {'enc new':>9} {'ratio':>6}   {'dec old':>9} {'dec new':>9} {'ratio':>6}")
ratios = []
for name in order:
    if ('old', name) not in best or ('new', name) not in best:
        continue
    (eo, do), (en, dn) = best[('old', name)], best[('new', name)]
    re, rd = en / eo, dn / do
    ratios += [(re, name + ' encode'), (rd, name + ' decode')]
    print(f"{name:28} {eo:9.1f} {en:9.1f} {re:6.3f}   {do:9.1f} {dn:9.1f} {rd:6.3f}")
geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
worst = max(ratios)
enc = [r for r, n in ratios if n.endswith('encode')]
dec = [r for r, n in ratios if n.endswith('decode')]
print(f"geometric mean new/old: {geo:.3f} (encode {math.exp(sum(map(math.log, enc)) / len(enc)):.3f}, "
      f"decode {math.exp(sum(map(math.log, dec)) / len(dec)):.3f}); worst {worst[0]:.3f} ({worst[1]})")
PY
