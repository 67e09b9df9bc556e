#!/usr/bin/env bash
# Side-by-side benchmark against nginx and LiteLLM, one command: benches/side-by-side.sh
#
#   1. installs Debian's nginx-light (the floor row: a plain streaming reverse proxy) when
#      there is no nginx, with scripts/apt-install.sh (root, or sudo without
#      a password; otherwise it says what to install); the distribution's own nginx service
#      the package starts is stopped again (the benchmark starts its own, on a free port);
#   2. installs litellm[proxy] (pinned: benches/litellm/requirements.txt) into its own cached venv,
#      ~/.cache/assist-gateway/bench-venv (once; a change to the list reinstalls);
#   3. installs oha 1.16.0 (the closed-loop load) into ~/.cache/assist-gateway/oha (once),
#      builds the release gateway and the bench (benches/side_by_side/main.rs);
#   4. runs it: scripted upstream in process, then direct / nginx / LiteLLM / gateway
#      passthrough / gateway brunix one after another under the same load, each target
#      pinned to one core and the load on the other (taskset; BENCH_PIN=off to share them),
#      and prints one table and the ratios against nginx (stdout; progress on stderr).
#
# Steps 1 and 2 are skipped when BENCH_TARGETS leaves out nginx or litellm.
# Scale it with the BENCH_* variables listed at the top of benches/side_by_side/main.rs, e.g.
#   BENCH_SECS=10 BENCH_STEP_SECS=3 benches/side-by-side.sh       longer, steadier runs
#   BENCH_TARGETS=direct,nginx,passthrough benches/side-by-side.sh      only some rows
# Everything runs on 127.0.0.1; Ctrl-C stops every process the run started.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
# The same cached build as scripts/test.sh.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
venv="${BENCH_VENV:-$cache/bench-venv}"
req="$here/benches/litellm/requirements.txt"
# The same default as benches/side_by_side/main.rs.
targets=",${BENCH_TARGETS:-direct,nginx,litellm,passthrough,brunix},"
targets="${targets// /}"

if [[ "$targets" == *,nginx,* ]] && [ -z "${BENCH_NGINX:-}" ]; then
  if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    "$here/scripts/apt-install.sh" nginx-light \
      || { echo "bench: no nginx; set BENCH_NGINX, or leave nginx out of BENCH_TARGETS" >&2; exit 1; }
    # The package starts a system-wide nginx on port 80; the benchmark starts its own.
    { invoke-rc.d nginx stop || sudo -n invoke-rc.d nginx stop; } >/dev/null 2>&1 || true
  fi
  BENCH_NGINX="$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)"
  export BENCH_NGINX
fi
if [ -n "${BENCH_NGINX:-}" ]; then
  echo "bench: $("$BENCH_NGINX" -v 2>&1)" >&2
fi

if [[ "$targets" == *,litellm,* ]]; then
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/litellm" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
    echo "bench: installing litellm[proxy] (benches/litellm/requirements.txt) into $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
    echo "$want" > "$venv/.stamp"
  fi
  echo "bench: $("$venv/bin/python" -c 'import importlib.metadata as m; print("litellm", m.version("litellm"))')" >&2
fi

# oha drives the closed-loop columns: a load generator that is not the bottleneck (the
# bench's own client was, below nginx's ceiling). Built once into the cache;
# BENCH_OHA=off keeps the bench's own client.
oha_root="$cache/oha"
if [ -z "${BENCH_OHA:-}" ] && [ ! -x "$oha_root/bin/oha" ]; then
  echo "bench: installing oha 1.16.0 into $oha_root (once)" >&2
  CARGO_TARGET_DIR="$cache/oha-build" cargo install --locked --root "$oha_root" oha --version 1.16.0 >&2
fi
export BENCH_OHA="${BENCH_OHA:-$oha_root/bin/oha}"

# The release profile: the same optimised gateway binary a deployment runs (the bench
# profile would rebuild every dependency with line tables).
cd "$here"
cargo build --release --locked --bin assist-gateway >&2
BENCH_LITELLM="$venv/bin/litellm" exec cargo bench --profile release --locked --bench side_by_side
