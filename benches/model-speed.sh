#!/usr/bin/env bash
# Speed and memory of the local models (tests/model/gguf.txt) on this machine, with
# llama.cpp (llama-cpp-python, as the model server runs it): prompt processing and
# generation tokens/s, time to first token of a 1,500-token prompt, resident memory.
#
#   benches/model-speed.sh [MODEL...]     (default: every model in tests/model/gguf.txt)
#
# THREADS (default "1 2") and REPS (default 3: each figure is the best of REPS runs, since
# other work on the machine only ever slows a run down; the last column is the least other
# work seen during a run, in cores: near 0 means the figures are the machine's own).
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || mapfile -t args < <(awk '!/^#/ && NF { print $1 }' tests/model/gguf.txt)
[ "$#" -gt 0 ] || set -- "${args[@]}"
reps="${REPS:-3}"
model_env="$(./scripts/model-env.sh "$@")"
python="$(sed -n 1p <<<"$model_env")"
mapfile -t ggufs < <(sed -n '2p;4,$p' <<<"$model_env")

echo "| model | threads | prompt tokens/s | generation tokens/s | first token after 1,500 prompt tokens | peak RSS | other work (cores busy) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for i in "${!ggufs[@]}"; do
  for threads in ${THREADS:-1 2}; do
    runs=()
    for _ in $(seq 1 "$reps"); do
      runs+=("$(OMP_WAIT_POLICY=PASSIVE "$python" benches/model-speed.py "${ggufs[$i]}" "$threads")")
    done
    printf '%s\n' "${runs[@]}" | python3 -c '
import json, sys
runs = [json.loads(line) for line in sys.stdin]
name, threads = sys.argv[1], runs[0]["threads"]
pp = max(r["prompt_tok_s"] for r in runs)
gen = max(r["gen_tok_s"] for r in runs)
ttft = min(r["ttft_s"] for r in runs)
rss = max(r["peak_rss_mib"] for r in runs)
others = min(r["other_cores_busy"] for r in runs)
print(f"| {name} | {threads} | {pp:.0f} | {gen:.1f} | {ttft:.1f} s | {rss} MiB | {others:.2f} |")
' "$(basename "${ggufs[$i]}" .gguf)"
  done
done
