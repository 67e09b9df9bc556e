#!/usr/bin/env bash
# How many of the real-model test's golden questions (tests/it/real_model.rs: English and
# Spanish questions over examples/knowledge, each answer checked for the fact asked) each
# local model answers right, and how long the test takes with it. Prints a Markdown table.
#
#   benches/golden-answers.sh [MODEL...]     (default: every model in tests/model/gguf.txt)
#
# Runs `cargo test --release golden_questions` once per model with ASSIST_GOLDEN_MIN=0, so
# a model below the CI threshold is measured rather than failed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || mapfile -t args < <(awk '!/^#/ && NF { print $1 }' tests/model/gguf.txt)
[ "$#" -gt 0 ] || set -- "${args[@]}"
model_env="$(./scripts/model-env.sh "$@")"
export ASSIST_MODEL_PYTHON ASSIST_TEST_MINILM ASSIST_GOLDEN_MIN=0
ASSIST_MODEL_PYTHON="$(sed -n 1p <<<"$model_env")"
ASSIST_TEST_MINILM="$(sed -n 3p <<<"$model_env")"
mapfile -t ggufs < <(sed -n '2p;4,$p' <<<"$model_env")
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
cargo test --release --locked --no-run >&2

echo "| model | golden answers right | wrong | test time |"
echo "| --- | ---: | --- | ---: |"
for gguf in "${ggufs[@]}"; do
  line="$(ASSIST_MODEL_GGUF="$gguf" cargo test --release --locked -q golden_questions \
    -- --nocapture 2>&1 | grep '^golden answers:')"
  # "golden answers: R/N right in S s; wrong: [ids]"
  sed -E "s|^golden answers: ([0-9]+/[0-9]+) right in ([0-9]+) s; wrong: \[(.*)\]$|\| $(basename "$gguf" .gguf) \| \1 \| \3 \| \2 s \||" <<<"$line"
done
