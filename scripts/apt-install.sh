#!/usr/bin/env bash
# Installs the Debian packages named as arguments with apt-get (as root, or with sudo
# without a password), quietly; the package lists are refreshed only when the first try
# fails. Exits 3, saying what to install, when it has no right to install; otherwise
# with apt-get's status. Used by scripts/system-deps.sh and the benchmarks' scripts.
set -euo pipefail
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "please install: $* (e.g. apt-get install $*)" >&2
  exit 3
fi
echo "installing $*" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 \
  || { "${SUDO[@]}" apt-get update -qq >/dev/null && "${SUDO[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null; }
