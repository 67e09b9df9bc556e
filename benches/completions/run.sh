#!/usr/bin/env bash
# The completion benchmark end to end: builds the spans (build.py), indexes the library's
# other files as the repository, starts llama.cpp's server with the model and completes
# every span through the gateway's own completion path. Prints the table; the outcomes of
# every span go to OUT/outcomes-MODEL-SPANS[-OPTIONS].json.
#
#   benches/completions/run.sh [MODEL] [eval options...]
#
#   MODEL    a name in tests/model/gguf.txt (default qwen2.5-coder-0.5b, the quick start's)
#   options  passed to `assist-gateway eval completions`, e.g. --limit 40,
#            --modes suffix,repository, --max-tokens 48
#   SPANS    which spans: spans.jsonl (all, the default) or spans-cross-file.jsonl (those
#            whose middle uses a name only the repository declares)
#   ORACLE=1 instead of the gateway's eval, oracle.py: the model given the declarations
#            each middle needs (the ceiling of repository context; Qwen's template only,
#            48 tokens, no eval options)
#
# Everything is cached under ~/.cache/assist-gateway: the model server and models
# (scripts/model-env.sh), the spans and the index (completion-bench/), the build.
# A run over all 320 spans in the three modes takes about 35 minutes with the 0.5B model
# on 2 cores, about an hour with the 1.5B one.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-qwen2.5-coder-0.5b}"
[ "$#" -gt 0 ] && shift
oracle="${ORACLE:-}"
if [ -n "$oracle" ] && { [ "$oracle" != 1 ] || [ "$#" -gt 0 ]; }; then
  echo "ORACLE=1 runs oracle.py, which takes no eval options" >&2
  exit 2
fi
port="${MODEL_PORT:-8097}"

out="$(python3 "$here/benches/completions/build.py")"
model_env="$("$here/scripts/model-env.sh" "$model")"
python="$(sed -n 1p <<<"$model_env")"
gguf="$(sed -n 2p <<<"$model_env")"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
(cd "$here" && cargo build --release --locked)
bin="$CARGO_TARGET_DIR/release/assist-gateway"

# The repository's index (BM25; the completion path searches lexically), built afresh
# each run (17 files: under a second).
data="$out/data"
config="$out/gateway.toml"
cat >"$config" <<EOF
data_dir = "$data"

[llm]
provider = "openai"
base_url = "http://127.0.0.1:$port/v1"
model = "$model"
EOF
"$bin" ingest --rebuild --config "$config" "$out/repo" >&2

if curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1; then
  echo "something already answers on port $port (a model server left running?): stop it, or set MODEL_PORT" >&2
  exit 1
fi
cores="$(nproc)"
OMP_WAIT_POLICY=PASSIVE "$python" -m llama_cpp.server --model "$gguf" --model_alias "$model" \
  --host 127.0.0.1 --port "$port" --n_threads "$cores" --n_threads_batch "$cores" \
  --n_ctx 4096 --logits_all false >"$out/model-server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait 2>/dev/null || true' EXIT
ready=
for _ in $(seq 1 240); do
  kill -0 "$server" 2>/dev/null || { echo "the model server stopped (see $out/model-server.log)" >&2; exit 1; }
  if curl -fsS "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q "\"$model\""; then
    ready=1
    break
  fi
  sleep 0.25
done
[ -n "$ready" ] || { echo "the model server did not serve $model within 60 s (see $out/model-server.log)" >&2; exit 1; }

started=$(date +%s)
spans="${SPANS:-spans.jsonl}"
# Named after everything that changes the figures: model, spans and options.
options="$*"
options="${options//--/}"
options="${options// /_}"
options="${options//,/+}"
outcomes="$out/outcomes-$model-${spans%.jsonl}${options:+-$options}.json"
if [ -n "$oracle" ]; then
  python3 "$here/benches/completions/oracle.py" "http://127.0.0.1:$port/v1" "$model" "$out/$spans"
  echo "$model on $spans (oracle), $(( $(date +%s) - started )) s on $cores cores" >&2
  exit 0
fi
"$bin" eval completions --config "$config" --dataset "$out/$spans" --json "$outcomes" "$@"
echo "$model on $spans, $(( $(date +%s) - started )) s on $cores cores; outcomes in $outcomes" >&2
