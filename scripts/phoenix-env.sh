#!/usr/bin/env bash
# Creates (once) the virtualenv holding Arize Phoenix (tests/phoenix/requirements.txt), the
# OTLP trace backend the tracing tests start, and prints its `phoenix` command. A venv of
# its own, outside the clone: Phoenix's dependencies (pandas, pyarrow, sqlalchemy,
# opentelemetry) must not move the client packages' pins. Idempotent: a warm machine
# reuses it; a change to the list reinstalls.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/tests/phoenix/requirements.txt"
venv="${ASSIST_PHOENIX_VENV:-$HOME/.cache/assist-gateway/phoenix}"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/phoenix" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "phoenix-env: installing Arize Phoenix into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/phoenix"
