#!/usr/bin/env bash
# What tracing costs, in instructions per answer (steady to a few tenths of a percent,
# where throughput and CPU time on a virtual machine scatter by ±20 %), one command:
#   benches/trace-cost.sh
#
#   1. installs Debian's valgrind when it is missing (root, or sudo without a password;
#      otherwise it says what to install);
#   2. builds the release gateway and the bench (benches/trace_cost.rs);
#   3. runs the gateway under valgrind's callgrind, untraced and traced, for the
#      passthrough and brunix rows, and prints one table (stdout; progress on stderr).
#
# Scale it with the TRACE_COST_* variables listed at the top of benches/trace_cost.rs, e.g.
#   TRACE_COST_REPEAT=1 TRACE_COST_TARGETS=passthrough benches/trace-cost.sh
# About 13 minutes with the defaults on 2 cores (after the build).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
# The same cached build as scripts/test.sh.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"

if [ -z "${TRACE_COST_VALGRIND:-}" ] && ! command -v valgrind >/dev/null 2>&1; then
  "$here/scripts/apt-install.sh" valgrind || { echo "bench: no valgrind; or set TRACE_COST_VALGRIND" >&2; exit 1; }
fi
echo "bench: $("${TRACE_COST_VALGRIND:-valgrind}" --version)" >&2

cd "$here"
cargo build --release --locked --bin assist-gateway >&2
exec cargo bench --profile release --locked --bench trace_cost
