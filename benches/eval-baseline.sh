#!/usr/bin/env bash
# The answer-evaluation baseline of docs/evaluation.md: the quick start's model (Qwen2.5-Coder-0.5B-
# Instruct on llama.cpp's server) answers every question of the shipped golden sets, with
# examples/knowledge ingested (BM25 + all-MiniLM-L6-v2 in process), and a larger local model
# (Qwen2.5-Coder-1.5B-Instruct, on a second server) judges. Prints each set's summary table;
# the JSON and HTML reports go to OUT (default data/eval-baseline/).
#
#   benches/eval-baseline.sh [--limit N]     (N questions per set; default: all)
#
# ANSWER_MODEL and JUDGE_MODEL (names in tests/model/gguf.txt; the same name runs one
# server for both), MODEL_THREADS (default: every core) and MODEL_PORT (default 8091; the
# judge's server is the next port) set up the model servers.
# Slow: on 2 cores a question takes a few minutes (one answer and about 8 judge calls).
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${2:-0}"
[ "${1:-}" = "--limit" ] || limit=0
out="${OUT:-data/eval-baseline}"
answer_model="${ANSWER_MODEL:-qwen2.5-coder-0.5b}"
judge_model="${JUDGE_MODEL:-qwen2.5-coder-1.5b}"
model_port="${MODEL_PORT:-8091}"
judge_port="$model_port"
[ "$judge_model" = "$answer_model" ] || judge_port=$((model_port + 1))
threads="${MODEL_THREADS:-$(nproc)}"

model_env="$(./scripts/model-env.sh "$answer_model" "$judge_model")"
python="$(sed -n 1p <<<"$model_env")"
answer_gguf="$(sed -n 2p <<<"$model_env")"
minilm="$(sed -n 3p <<<"$model_env")"
judge_gguf="$(sed -n 4p <<<"$model_env")"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
cargo build --release --locked >&2
bin="$CARGO_TARGET_DIR/release/assist-gateway"

mkdir -p "$out"
data="$out/data"
config="$out/gateway.toml"
cat >"$config" <<EOF2
data_dir = "$data"

[llm]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "$answer_model"

[assistant]
context_tokens = 2048
answer_reserve_tokens = 512

[retrieval]
top_k = 3

[embeddings]
provider = "local"
path = "$minilm"

[eval]
answer_max_tokens = 128

[judge]
provider = "openai"
base_url = "http://127.0.0.1:$judge_port/v1"
model = "$judge_model"
max_tokens = 256
json_mode = true
EOF2

echo "eval-baseline: ingesting examples/knowledge into $data" >&2
"$bin" ingest --config "$config" examples/knowledge >&2

servers=()
trap 'for s in "${servers[@]}"; do kill "$s" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
# serve NAME GGUF PORT: a model server with a 4096-token window, until it answers.
serve() {
  OMP_WAIT_POLICY=PASSIVE "$python" -m llama_cpp.server --model "$2" --model_alias "$1" \
    --host 127.0.0.1 --port "$3" --n_threads "$threads" --n_threads_batch "$threads" \
    --n_ctx 4096 --logits_all false --interrupt_requests false >"$out/model-server-$1.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 240); do
    curl -fsS "http://127.0.0.1:$3/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "${servers[-1]}" 2>/dev/null || { echo "the model server stopped (see $out/model-server-$1.log)" >&2; exit 1; }
    sleep 0.25
  done
  echo "the model server $1 did not start within 60 s" >&2
  exit 1
}
serve "$answer_model" "$answer_gguf" "$model_port"
[ "$judge_port" = "$model_port" ] || serve "$judge_model" "$judge_gguf" "$judge_port"

for set in answers editor; do
  echo "eval-baseline: examples/eval/$set.jsonl (answers: $answer_model, judge: $judge_model)" >&2
  started=$SECONDS
  "$bin" eval answers --config "$config" \
    --dataset "examples/eval/$set.jsonl" --limit "$limit" --out "$out/$set"
  echo "eval-baseline: $set took $((SECONDS - started)) s" >&2
done
