#!/usr/bin/env bash
# Creates (once) the Python virtualenv with the pinned client packages the tests drive,
# outside the clone, and prints its python. Idempotent: a warm machine reuses it.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/tests/clients/requirements.txt"
venv="${ASSIST_VENV:-$HOME/.cache/assist-gateway/venv}"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing $(grep -cv '^#' "$req") pinned client packages into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
