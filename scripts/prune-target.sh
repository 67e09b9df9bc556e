#!/usr/bin/env bash
# Keeps a cached target directory from growing without bound: cargo never deletes the
# binaries of earlier builds of this crate's own tests, benches and library, and each is
# tens of megabytes. Keeps the newest build of each, removes the older ones.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$here/target}"
names=(assist_gateway libassist_gateway)
for f in "$here"/tests/*.rs "$here"/benches/*.rs; do names+=("$(basename "$f" .rs)"); done
for profile in debug release; do
  deps="$target/$profile/deps"
  [ -d "$deps" ] || continue
  for name in "${names[@]}"; do
    # Artifacts are NAME-HASH[.ext]; group by extension, keep the newest of each group.
    for ext in "" .d .rlib .rmeta; do
      ls -t "$deps/$name"-*"$ext" 2>/dev/null | grep -E "/$name-[0-9a-f]{16}$ext\$" | tail -n +2 | xargs -r rm -f
    done
  done
done
