#!/usr/bin/env bash
# Side-by-side benchmark against LiteLLM, one command: benches/side-by-side.sh
#
#   1. installs litellm[proxy] (pinned: benches/litellm/requirements.txt) into its own cached venv,
#      ~/.cache/assist-gateway/bench-venv (once; a change to the list reinstalls);
#   2. builds the release gateway and the load generator (benches/side_by_side.rs);
#   3. runs it: scripted upstream in process, then direct / LiteLLM / gateway passthrough /
#      gateway brunix one after another under the same open-loop load, and prints one
#      table (stdout; progress on stderr).
#
# Scale it with the BENCH_* variables listed at the top of benches/side_by_side.rs, e.g.
#   BENCH_SECS=10 BENCH_STEP_SECS=3 benches/side-by-side.sh       longer, steadier runs
#   BENCH_TARGETS=direct,passthrough benches/side-by-side.sh      only some rows
# Everything runs on 127.0.0.1; Ctrl-C stops every process the run started.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
venv="${BENCH_VENV:-$cache/bench-venv}"
req="$here/benches/litellm/requirements.txt"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/litellm" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "bench: installing litellm[proxy] (benches/litellm/requirements.txt) into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
  echo "$want" > "$venv/.stamp"
fi
echo "bench: $("$venv/bin/python" -c 'import importlib.metadata as m; print("litellm", m.version("litellm"))')" >&2

# The release profile: the same optimised gateway binary a deployment runs (the bench
# profile would rebuild every dependency with line tables).
cd "$here"
cargo build --release --locked --bin assist-gateway >&2
BENCH_LITELLM="$venv/bin/litellm" exec cargo bench --profile release --locked --bench side_by_side
