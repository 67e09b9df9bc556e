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

echo "== OpenAI: a question about the selected code (editor context in the user field, base64)"
SEL=$(printf '%s' 'let port = env("BRISA_PORT") ?? 8080' | base64 | tr -d '\n')
USER_FIELD=$(printf '{"selected_text":"%s","user_info":{"dev_id":1,"project_id":1,"org_id":1}}' "$SEL")
curl -sS "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d "$(
  python3 -c 'import json,sys; print(json.dumps({"model": "brunix", "session_id": "curl-demo",
    "user": sys.argv[1], "messages": [{"role": "user", "content": "what does this code do?"}]}))' "$USER_FIELD")"
echo
echo "   (the response's \"sources\" field lists the knowledge chunks the answer was given)"

echo "== OpenAI: the same session remembers the previous turns"
curl -sS "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "brunix", "session_id": "curl-demo",
  "messages": [{"role": "user", "content": "Summarise your previous answer in one line."}]
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
