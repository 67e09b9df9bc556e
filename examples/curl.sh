#!/usr/bin/env bash
# Talk to a running assist-gateway with curl, in both dialects.
# Usage: examples/curl.sh [BASE_URL]   (default http://127.0.0.1:8080)
# Set ASSIST_KEY when the gateway has server.api_keys.
set -euo pipefail
BASE=${1:-http://127.0.0.1:8080}
AUTH=()
[ -n "${ASSIST_KEY:-}" ] && AUTH=(-H "Authorization: Bearer $ASSIST_KEY")

echo "== readiness"
curl -sS "${AUTH[@]}" "$BASE/ready"; echo

echo "== OpenAI: list models"
curl -sS "${AUTH[@]}" "$BASE/v1/models"; echo

echo "== OpenAI: streamed chat (SSE)"
curl -sSN "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "brunix",
  "stream": true,
  "stream_options": {"include_usage": true},
  "session_id": "curl-demo",
  "messages": [{"role": "user", "content": "Write a Rust function that reverses a string."}]
}'
echo

echo "== OpenAI: whole answer (JSON)"
curl -sS "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "brunix",
  "max_tokens": 64,
  "messages": [{"role": "user", "content": "What does `?` do in Rust?"}]
}'
echo

echo "== Ollama: list models"
curl -sS "${AUTH[@]}" "$BASE/api/tags"; echo

echo "== Ollama: streamed chat (NDJSON; streaming is the default)"
curl -sSN "${AUTH[@]}" "$BASE/api/chat" -d '{
  "model": "brunix",
  "messages": [{"role": "user", "content": "¿Qué es un closure en Rust?"}]
}'
echo
