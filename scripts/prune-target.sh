#!/usr/bin/env bash
# Keeps a cached target directory from growing without bound: cargo never deletes the
# binaries of earlier builds of this crate's own tests, benches and library (tens of
# megabytes each). For each, keeps the latest build and removes the older ones.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$here/target}"
names=(assist_gateway libassist_gateway it)
for f in "$here"/benches/*.rs "$here"/fuzz/fuzz_targets/*.rs; do
  names+=("$(basename "$f" .rs)")
done
# Host builds (PROFILE/deps) and target-triple builds (the fuzz targets: TRIPLE/PROFILE/deps).
for deps in "$target"/{debug,release}/deps "$target"/*/{debug,release}/deps; do
  [ -d "$deps" ] || continue
  for name in "${names[@]}"; do
    # Artifacts are NAME-HASH[.ext]. Several of one build share a name (the library's
    # and the binary's unit tests), so everything written within ten minutes of the
    # newest stays.
    files=()
    while IFS= read -r f; do files+=("$f"); done < <(
      find "$deps" -maxdepth 1 -type f -regextype posix-extended \
        -regex ".*/$name-[0-9a-f]{16}(\.d|\.rlib|\.rmeta)?" 2>/dev/null || true)
    if [ ${#files[@]} -eq 0 ]; then continue; fi
    newest="$(stat -c %Y "${files[@]}" | sort -n | tail -n 1)"
    for f in "${files[@]}"; do
      if [ "$(stat -c %Y "$f")" -lt $((newest - 600)) ]; then rm -f "$f"; fi
    done
  done
done
