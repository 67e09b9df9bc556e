#!/usr/bin/env bash
# Installs (once) the continue CLI, Claude Code and Codex CLI, pinned in
# tests/clients/package.json and its lock file (npm ci: exactly the locked versions), outside
# the clone with the machine's Node.js and npm, and prints the path of its `cn` command
# (`claude` and `codex` are beside it). ASSIST_NODE_DIR installs elsewhere.
# Idempotent: a warm machine reuses it; a change to package.json reinstalls.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${ASSIST_NODE_DIR:-${ASSIST_CACHE:-$HOME/.cache/assist-gateway}/node}"
pkg="$here/tests/clients/package.json"
lock="$here/tests/clients/package-lock.json"
want="$(cat "$pkg" "$lock" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$dir/node_modules/.bin/cn" ] || [ ! -x "$dir/node_modules/.bin/claude" ] ||
  [ ! -x "$dir/node_modules/.bin/codex" ] || [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "node-env: installing the continue CLI, Claude Code and Codex CLI into $dir" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$pkg" "$lock" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  echo "$want" > "$dir/.stamp"
fi
echo "$dir/node_modules/.bin/cn"
