#!/usr/bin/env bash
# The project's test command: unit and integration tests (real router on 127.0.0.1
# against a scripted upstream) and the real Python clients (openai, ollama).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
ASSIST_PYTHON="$(./scripts/python-env.sh)"
export ASSIST_PYTHON
cargo test --release --locked "$@"
