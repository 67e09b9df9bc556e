#!/usr/bin/env bash
# The README's answer-evaluation baseline: the CI's small model (SmolLM2-135M-Instruct on
# llama.cpp's server) answers and judges every question of the shipped golden sets, with
# examples/knowledge ingested (BM25 + all-MiniLM-L6-v2 in process). Prints each set's
# summary table; the JSON and HTML reports go to OUT (default data/eval-baseline/).
#
#   benches/eval-baseline.sh [--limit N]     (N questions per set; default: all)
#
# MODEL_THREADS (default: every core) and MODEL_PORT (default 8091) set up the model server.
# Slow: on 2 cores a question takes a minute or two (one answer and about 8 judge calls).
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${2:-0}"
[ "${1:-}" = "--limit" ] || limit=0
out="${OUT:-data/eval-baseline}"
model_port="${MODEL_PORT:-8091}"
threads="${MODEL_THREADS:-$(nproc)}"

model_env="$(./scripts/model-env.sh)"
python="$(sed -n 1p <<<"$model_env")"
gguf="$(sed -n 2p <<<"$model_env")"
minilm="$(sed -n 3p <<<"$model_env")"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
cargo build --release --locked >&2
bin="$CARGO_TARGET_DIR/release/assist-gateway"

mkdir -p "$out"
data="$out/data"
config="$out/gateway.toml"
cat >"$config" <<EOF
data_dir = "$data"

[llm]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "smollm2"

[assistant]
context_tokens = 4096
answer_reserve_tokens = 256

[retrieval]
top_k = 3

[embeddings]
provider = "local"
path = "$minilm"

[eval]
answer_max_tokens = 128

[judge]
provider = "openai"
base_url = "http://127.0.0.1:$model_port/v1"
model = "smollm2"
max_tokens = 256
json_mode = true
EOF

echo "eval-baseline: ingesting examples/knowledge into $data" >&2
"$bin" ingest --config "$config" examples/knowledge >&2

OMP_WAIT_POLICY=PASSIVE "$python" -m llama_cpp.server --model "$gguf" --model_alias smollm2 \
  --host 127.0.0.1 --port "$model_port" --n_threads "$threads" --n_ctx 4096 \
  >"$out/model-server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  curl -fsS "http://127.0.0.1:$model_port/v1/models" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { echo "the model server stopped (see $out/model-server.log)" >&2; exit 1; }
  sleep 0.25
done

for set in answers editor; do
  echo "eval-baseline: examples/eval/$set.jsonl" >&2
  started=$SECONDS
  "$bin" eval answers --config "$config" \
    --dataset "examples/eval/$set.jsonl" --limit "$limit" --out "$out/$set"
  echo "eval-baseline: $set took $((SECONDS - started)) s" >&2
done
