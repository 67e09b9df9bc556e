#!/usr/bin/env bash
# Installs (once) cargo-fuzz, pinned, outside the clone, and prints the path of its
# `cargo-fuzz` binary (scripts/fuzz.sh runs it).
#   ~/.cache/assist-gateway/cargo-fuzz   cargo install --root (bin/cargo-fuzz)
# Idempotent: a warm machine reuses it; a change of the pinned version reinstalls.
# Progress goes to stderr.
set -euo pipefail
version="0.13.2"
root="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}/cargo-fuzz"
bin="$root/bin/cargo-fuzz"
if [ ! -x "$bin" ] || [ "$(cat "$root/.stamp" 2>/dev/null)" != "$version" ]; then
  echo "fuzz-env: installing cargo-fuzz $version into $root" >&2
  rm -rf "$root"
  # Its own build directory, dropped afterwards: the tool is all we keep.
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  CARGO_TARGET_DIR="$build" cargo install --locked --quiet "cargo-fuzz@$version" --root "$root" >&2
  echo "$version" > "$root/.stamp"
fi
echo "$bin"
