#!/usr/bin/env bash
# System packages the tests use, from Debian's archive: redis-server (the Redis session
# store is tested against a real server) and g++ (llama.cpp's server, compiled by pip, and
# libFuzzer for fuzzing campaigns).
# Installs what is missing when it can (root or sudo); otherwise says what to install.
# Idempotent and quiet when all is present.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "system-deps: please install: ${missing[*]} (e.g. apt-get install ${missing[*]}); the tests that need them are skipped" >&2
  exit 0
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
  || { "${SUDO[@]}" apt-get update -qq >/dev/null && "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
# The package starts a system-wide server on 6379; the tests start their own on free ports.
