#!/usr/bin/env bash
# End-to-end check of cited sources with a real Open WebUI (not in CI: it is about 7 GB).
#   1. installs Open WebUI (pinned: benches/open-webui/requirements.txt) into its own cached
#      venv, ~/.cache/assist-gateway/open-webui/venv, once;
#   2. starts it on OWUI_PORT (default 3000), offline, with a fresh data folder, pointed at
#      the gateway's OpenAI dialect (GATEWAY_URL, default http://127.0.0.1:8080, key
#      GATEWAY_KEY, default key-a) and forwarding its chat id (X-OpenWebUI-Chat-Id);
#   3. asks a question through Open WebUI's own API and reads back the chat it stored
#      (check.py): the answer must carry the gateway's sources, each a /v1/sources/{id} link;
#   4. with SCREENSHOT=file.png, opens the chat in headless Chromium (Debian's chromium,
#      driven by playwright-core from npm; both installed on demand) and saves the page.
# The gateway must already run with knowledge, e.g.:
#   ASSIST__SERVER__API_KEYS=key-a ./quickstart.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${HOME}/.cache/assist-gateway/open-webui"
venv="$cache/venv"
req="$here/benches/open-webui/requirements.txt"
gateway="${GATEWAY_URL:-http://127.0.0.1:8080}"
key="${GATEWAY_KEY:-key-a}"
port="${OWUI_PORT:-3000}"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/open-webui" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "open-webui: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv (about 7 GB)" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
  echo "$want" > "$venv/.stamp"
fi
curl -sf -o /dev/null -H "Authorization: Bearer $key" "$gateway/v1/models" || {
  echo "open-webui: no gateway answering at $gateway with key $key: start one with knowledge, e.g. ASSIST__SERVER__API_KEYS=$key ./quickstart.sh" >&2
  exit 1
}

work="$(mktemp -d)"
trap 'kill "${owui_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
embed_model="$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
  -d '{"model":"none","input":"x"}' "$gateway/v1/embeddings" | sed -n 's/.*"model":"\([^"]*\)".*/\1/p' || true)"
echo "open-webui: starting $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("open-webui"))') on port $port (log: $work/open-webui.log)" >&2
(
  cd "$work"
  export DATA_DIR="$work/data" WEBUI_SECRET_KEY=open-webui-check \
    OPENAI_API_BASE_URL="$gateway/v1" OPENAI_API_KEY="$key" ENABLE_OLLAMA_API=false \
    ENABLE_FORWARD_USER_INFO_HEADERS=true \
    OFFLINE_MODE=true HF_HUB_OFFLINE=1 RAG_EMBEDDING_MODEL_AUTO_UPDATE=false \
    RAG_RERANKING_MODEL_AUTO_UPDATE=false ENABLE_VERSION_UPDATE_CHECK=false \
    RAG_EMBEDDING_ENGINE=openai RAG_OPENAI_API_BASE_URL="$gateway/v1" RAG_OPENAI_API_KEY="$key" \
    RAG_EMBEDDING_MODEL="${embed_model:-all-MiniLM-L6-v2}" \
    ENABLE_TITLE_GENERATION=false ENABLE_FOLLOW_UP_GENERATION=false \
    ENABLE_TAGS_GENERATION=false ENABLE_AUTOCOMPLETE_GENERATION=false
  exec "$venv/bin/open-webui" serve --host 127.0.0.1 --port "$port"
) > "$work/open-webui.log" 2>&1 &
owui_pid=$!

"$venv/bin/python" "$here/benches/open-webui/check.py" "http://127.0.0.1:$port" "$gateway" "$work/result.json" || {
  echo "open-webui: the check failed; the last lines of its log:" >&2
  tail -40 "$work/open-webui.log" >&2
  exit 1
}

if [ -n "${SCREENSHOT:-}" ]; then
  command -v chromium > /dev/null || { echo "open-webui: installing Debian's chromium" >&2; apt-get install -y -q chromium > /dev/null; }
  node_dir="$cache/node"
  if [ ! -d "$node_dir/node_modules/playwright-core" ]; then
    mkdir -p "$node_dir" && (cd "$node_dir" && npm install --silent --no-audit --no-fund playwright-core@1.64.1 > /dev/null)
  fi
  NODE_PATH="$node_dir/node_modules" node "$here/benches/open-webui/screenshot.js" \
    "http://127.0.0.1:$port" "$work/result.json" "$SCREENSHOT"
  echo "open-webui: screenshot in $SCREENSHOT" >&2
fi
