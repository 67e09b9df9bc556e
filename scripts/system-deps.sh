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
status=0
"$(dirname "$0")/apt-install.sh" "${missing[@]}" || status=$?
if [ "$status" -eq 3 ]; then
  echo "system-deps: the tests that need ${missing[*]} are skipped" >&2
  exit 0
fi
# A package's system-wide server (redis on 6379) is left alone: the tests start their
# own on free ports.
exit "$status"
