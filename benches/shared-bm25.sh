#!/usr/bin/env bash
# BM25 in Qdrant (sparse vectors with Qdrant's IDF, `qdrant.lexical`) against BM25 in
# tantivy, on the same corpora in the same run: nDCG@10 of `eval retrieval` on
# examples/knowledge and on the Debian benchmark (benches/debian), and the time of each
# ingest and each evaluation.
#
# The Qdrant side is tests/qdrant_grpc_server.py (the real Qdrant gRPC API in front of
# the qdrant-client package's in-memory engine, brute force in Python): its times say
# nothing of a Qdrant server's; its rankings are Qdrant's formula.
#
# Usage: benches/shared-bm25.sh        (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/assist-gateway/target}"
cargo build --release --locked >&2
bin="$CARGO_TARGET_DIR/release/assist-gateway"
python="$(./scripts/python-env.sh)"
debian="$(benches/debian/build-corpus.sh 2>/dev/null | tail -1)"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
"$python" tests/qdrant_grpc_server.py 0 >"$work/qdrant.out" &
server=$!
for _ in $(seq 100); do grep -q LISTENING "$work/qdrant.out" 2>/dev/null && break; sleep 0.1; done
port="$(sed -n 's/LISTENING //p' "$work/qdrant.out")"

printf '%-10s %-8s %8s %10s %10s\n' corpus lexical nDCG@10 ingest_s eval_s
for corpus in examples debian; do
  case $corpus in
    examples) source=examples/knowledge; questions=examples/knowledge/queries.jsonl ;;
    debian) source="$debian"; questions=benches/debian/questions.jsonl ;;
  esac
  for lexical in tantivy qdrant; do
    dir="$work/$lexical-$corpus"
    mkdir -p "$dir"
    {
      echo "data_dir = \"$dir/data\""
      echo "[embeddings]"
      echo 'provider = "none"'
      if [ "$lexical" = qdrant ]; then
        echo "[qdrant]"
        echo "url = \"http://127.0.0.1:$port\""
        echo "collection = \"$corpus\""
      fi
    } >"$dir/gateway.toml"
    start=$(date +%s.%N)
    "$bin" ingest --config "$dir/gateway.toml" "$source" >/dev/null 2>&1
    mid=$(date +%s.%N)
    "$bin" eval retrieval --config "$dir/gateway.toml" --dataset "$questions" --json "$dir/eval.json" >/dev/null 2>&1
    end=$(date +%s.%N)
    ndcg="$("$python" -c 'import json, sys
rows = json.load(open(sys.argv[1]))
print("%.3f" % next(r["ndcg_at_10"] for r in rows if r["group"] == "all" and r["mode"] == "bm25"))' "$dir/eval.json")"
    awk -v c="$corpus" -v l="$lexical" -v n="$ndcg" -v s="$start" -v m="$mid" -v e="$end" \
      'BEGIN { printf "%-10s %-8s %8s %10.2f %10.2f\n", c, l, n, m - s, e - m }'
  done
done
