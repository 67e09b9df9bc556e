#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ (cargo-fuzz and libFuzzer, with the project's own
# toolchain) and runs each for a bounded time: the request parsers of both dialects and
# the editor-context `user` field. Fails when a target crashes, naming the reproducer.
#
#   scripts/fuzz.sh [BUDGET] [TARGET...]
#     BUDGET  per target: `30s` (seconds; the default) or a number of runs (`2000000`)
#     TARGET  default: every target (`cargo fuzz list`)
#
# The build goes to ~/.cache/assist-gateway/fuzz-target (its own: every crate is
# instrumented); the corpus each run grows and any crash input go to
# ~/.cache/assist-gateway/fuzz/. The seeds in fuzz/corpus/TARGET and the kept crash inputs
# in fuzz/regressions/TARGET are read, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-30s}"
shift || true
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
cargo_fuzz="$(./scripts/fuzz-env.sh)"
export CARGO_TARGET_DIR="${ASSIST_FUZZ_TARGET_DIR:-$cache/fuzz-target}"
# No sanitizer: the code under test is safe Rust, where a bug is a panic, a hang or
# runaway memory, which libFuzzer catches without one; and then cargo-fuzz passes no
# nightly-only flag, so the toolchain that builds the gateway builds the targets too.
# 16 codegen units a crate: a cold build took 29 minutes on 2 cores (in a cold CI run),
# against the better part of an hour and a half with 1, for somewhat slower runs. (An
# unoptimised `--dev` build saves little, ~18 minutes with a model server sharing the
# cores, and runs ~24 times fewer inputs a second.) The same flags for build and run, or the run
# rebuilds.
flags=(--sanitizer none --codegen-units 16)
case "$budget" in
  *s) limit=(-max_total_time="${budget%s}") ;;
  *) limit=(-runs="$budget") ;;
esac

# Each build of the targets is ~0.5 GB a target: keep only the latest.
./scripts/prune-target.sh
echo "fuzz: building the targets into $CARGO_TARGET_DIR" >&2
"$cargo_fuzz" fuzz build "${flags[@]}" >&2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <("$cargo_fuzz" fuzz list); fi

failed=()
for target in "${targets[@]}"; do
  corpus="$cache/fuzz/corpus/$target"
  artifacts="$cache/fuzz/artifacts/$target"
  log="$cache/fuzz/logs/$target.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  echo "fuzz: $target for ${budget} ..." >&2
  # New inputs go to the first corpus folder (the cache); the seeds are only read.
  seeds=("fuzz/corpus/$target")
  if [ -d "fuzz/regressions/$target" ]; then seeds+=("fuzz/regressions/$target"); fi
  if "$cargo_fuzz" fuzz run "${flags[@]}" "$target" "$corpus" "${seeds[@]}" -- \
      -dict=fuzz/requests.dict -artifact_prefix="$artifacts/" -timeout=10 \
      -print_final_stats=1 "${limit[@]}" >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)"
    echo "fuzz: $target ok: ${runs:-?} runs, ${speed:-?} exec/s, ${cov:-cov: ?}, corpus $(find "$corpus" -type f | wc -l) inputs" >&2
  else
    tail -n 40 "$log" >&2
    reproducer="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
    echo "fuzz: $target FAILED; reproducer: ${reproducer:-none written} (log: $log)" >&2
    echo "fuzz: replay: CARGO_TARGET_DIR=$CARGO_TARGET_DIR $cargo_fuzz fuzz run ${flags[*]} $target ${reproducer:-}" >&2
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran, no crash" >&2
