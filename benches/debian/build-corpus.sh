#!/usr/bin/env bash
# Build the Debian retrieval-benchmark corpus from pinned Debian bookworm packages.
#
#   benches/debian/build-corpus.sh [OUT]     (default: ~/.cache/assist-gateway/debian-corpus)
#
# Downloads debian-reference (en, es), maint-guide (en, es) and the Go library
# spf13/pflag (-dev package) with `apt-get download`, checks their exact versions and
# SHA-256, extracts them with `dpkg-deb -x`, converts every HTML chapter to one
# Markdown file (benches/debian/html2md.py), copies the non-test .go files, leaves
# out a few chapters in one language (cross-lingual questions, see README.md),
# then validates benches/debian/questions.jsonl against the result.
# Idempotent: if OUT carries a stamp equal to this script's pins, nothing is done.
# Progress goes to stderr; the last stdout line is the corpus path.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-$HOME/.cache/assist-gateway/debian-corpus}"
STAMP_NAME=".debian-corpus-stamp"

log() { printf '[debian-corpus] %s\n' "$*" >&2; }
die() { printf '[debian-corpus] ERROR: %s\n' "$*" >&2; exit 1; }

# --- pins: package, version, sha256 of the .deb (Debian 12 bookworm main) -------------
PINS=(
  "debian-reference-en|2.100|9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f"
  "debian-reference-es|2.100|a59b68c96f83d3cf29a476c847aee38364764603ea62eee592791e0a843a269e"
  "maint-guide|1.2.53|762c8a400a36668d2eb814a3ba356b06488fd889dfce478eb11d5cfb189a47b5"
  "maint-guide-es|1.2.53|5a76b5e43285173ce4cce9284fb47b9a1851a68a9c0c0b8300c338d8890a42b6"
  "golang-github-spf13-pflag-dev|1.0.6~git20210604-d5e0c0615ace-1|bd1c3c2a3e47512a64da02ebea900eb5a3f3c5d386e559d5718a3a935c0ea570"
)
# Bump when the conversion or the layout changes (invalidates existing stamps).
LAYOUT_VERSION=1

# --- layout ---------------------------------------------------------------------------
# debian-reference: html basename -> output name (same name in en/ and es/)
DR_CHAPTERS=(
  "pr01|pr01-preface"
  "ch01|ch01-gnu-linux-tutorials"
  "ch02|ch02-package-management"
  "ch03|ch03-system-initialization"
  "ch04|ch04-authentication-access-control"
  "ch05|ch05-network-setup"
  "ch06|ch06-network-applications"
  "ch07|ch07-gui-system"
  "ch08|ch08-i18n-l10n"
  "ch09|ch09-system-tips"
  "ch10|ch10-data-management"
  "ch11|ch11-data-conversion"
  "ch12|ch12-programming"
  "apa|apa-appendix"
)
# maint-guide: html basename -> output name
MG_CHAPTERS=(
  "start|ch01-getting-started"
  "first|ch02-first-steps"
  "modify|ch03-modifying-source"
  "dreq|ch04-required-files"
  "dother|ch05-other-files"
  "build|ch06-building"
  "checkit|ch07-checking"
  "update|ch08-updating"
  "upload|ch09-uploading"
  "advanced|apa-advanced"
)
# Chapters deliberately left out of the corpus (book/lang/name), so that questions about
# them asked in the other language can only be answered cross-lingually.
LEFT_OUT=(
  "debian-reference/es/ch04-authentication-access-control"
  "debian-reference/es/ch08-i18n-l10n"
  "debian-reference/es/ch10-data-management"
  "debian-reference/en/ch03-system-initialization"
  "debian-reference/en/ch06-network-applications"
  "debian-reference/en/ch11-data-conversion"
  "maint-guide/es/ch08-updating"
  "maint-guide/en/ch03-modifying-source"
)
GO_SRC="usr/share/gocode/src/github.com/spf13/pflag"

stamp_text() {
  local p
  echo "layout=$LAYOUT_VERSION"
  for p in "${PINS[@]}"; do echo "pin=$p"; done
  for p in "${LEFT_OUT[@]}"; do echo "left_out=$p"; done
  echo "html2md=$(sha256sum "$HERE/html2md.py" | cut -d' ' -f1)"
}

# --- idempotence ----------------------------------------------------------------------
if [[ -f "$OUT/$STAMP_NAME" ]] && [[ "$(cat "$OUT/$STAMP_NAME")" == "$(stamp_text)" ]]; then
  log "up to date: $OUT"
  echo "$OUT"
  exit 0
fi
if [[ -e "$OUT" ]] && ! { [[ -d "$OUT" ]] && [[ -z "$(ls -A "$OUT")" ]]; }; then
  if [[ -f "$OUT/$STAMP_NAME" ]]; then
    log "stale corpus (pins changed), rebuilding: $OUT"
  else
    die "$OUT exists but is not a corpus built by this script (no $STAMP_NAME); remove it or pass another OUT"
  fi
fi

for tool in apt-get dpkg-deb python3 sha256sum; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/debian-corpus.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/debs" "$WORK/cache/archives/partial" "$WORK/x"

# --- download ---------------------------------------------------------------------------
specs=()
for p in "${PINS[@]}"; do
  IFS='|' read -r pkg ver _sha <<<"$p"
  specs+=("$pkg=$ver")
done
download() {
  (cd "$WORK/debs" && apt-get download -q -o Dir::Cache="$WORK/cache" "${specs[@]}") >&2
}
log "downloading ${#specs[@]} packages with apt-get download"
if ! download; then
  log "apt-get download failed; running apt-get update and retrying"
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -q >&2 || die "apt-get update failed"
  elif command -v sudo >/dev/null; then
    sudo apt-get update -q >&2 || die "apt-get update failed"
  else
    die "apt-get download failed and apt-get update needs root"
  fi
  download || die "apt-get download failed for: ${specs[*]} (are these exact versions still in the archive? bookworm is required)"
fi

# --- verify versions and checksums -----------------------------------------------------
for p in "${PINS[@]}"; do
  IFS='|' read -r pkg ver sha <<<"$p"
  shopt -s nullglob
  debs=("$WORK/debs/${pkg}_"*.deb)
  shopt -u nullglob
  [[ ${#debs[@]} -eq 1 ]] || die "expected one .deb for $pkg, found ${#debs[@]}"
  got_ver="$(dpkg-deb -f "${debs[0]}" Version)"
  [[ "$got_ver" == "$ver" ]] || die "$pkg: version $got_ver downloaded but $ver is pinned (questions.jsonl is only valid for the pinned version)"
  got_sha="$(sha256sum "${debs[0]}" | cut -d' ' -f1)"
  [[ "$got_sha" == "$sha" ]] || die "$pkg $ver: sha256 $got_sha, expected $sha"
  dpkg-deb -x "${debs[0]}" "$WORK/x"
done
log "all packages match their pins"

# --- convert ------------------------------------------------------------------------------
STAGE="$WORK/corpus"
mkdir -p "$STAGE"
is_left_out() {
  local x
  for x in "${LEFT_OUT[@]}"; do [[ "$x" == "$1" ]] && return 0; done
  return 1
}
convert() { # src.html dest-without-ext
  local rel="${2#"$STAGE"/}"
  if is_left_out "$rel"; then
    log "left out: $rel.md"
    return 0
  fi
  [[ -f "$1" ]] || die "missing chapter in package: $1"
  mkdir -p "$(dirname "$2")"
  python3 "$HERE/html2md.py" "$1" "$2.md"
}
for lang in en es; do
  for c in "${DR_CHAPTERS[@]}"; do
    IFS='|' read -r src name <<<"$c"
    convert "$WORK/x/usr/share/debian-reference/$src.$lang.html" "$STAGE/debian-reference/$lang/$name"
  done
  mgdir="$WORK/x/usr/share/doc/maint-guide/html"
  [[ $lang == es ]] && mgdir="$WORK/x/usr/share/doc/maint-guide-es/html"
  for c in "${MG_CHAPTERS[@]}"; do
    IFS='|' read -r src name <<<"$c"
    convert "$mgdir/$src.$lang.html" "$STAGE/maint-guide/$lang/$name"
  done
done

mkdir -p "$STAGE/code/pflag"
n_go=0
for f in "$WORK/x/$GO_SRC"/*.go; do
  case "$f" in *_test.go) continue ;; esac
  cp "$f" "$STAGE/code/pflag/"
  n_go=$((n_go + 1))
done
[[ $n_go -gt 0 ]] || die "no .go files found under $GO_SRC"

# Identical rebuilds: fixed mtimes too (content is deterministic already).
find "$STAGE" -exec touch -h -d '2000-01-01 00:00:00 UTC' {} +

# --- validate the questions against the fresh corpus -----------------------------------
log "checking questions.jsonl"
python3 "$HERE/check-questions.py" "$STAGE" "$HERE/questions.jsonl" >&2 \
  || die "check-questions.py failed against the new corpus"

# --- install ------------------------------------------------------------------------------
stamp_text >"$STAGE/$STAMP_NAME"
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT"
mv "$STAGE" "$OUT"

log "corpus counts:"
for g in debian-reference/en debian-reference/es maint-guide/en maint-guide/es code/pflag; do
  files=$(find "$OUT/$g" -type f | wc -l)
  bytes=$(find "$OUT/$g" -type f -exec cat {} + | wc -c)
  printf '[debian-corpus]   %-22s %3d files %9d bytes\n' "$g" "$files" "$bytes" >&2
done
total_files=$(find "$OUT" -type f ! -name "$STAMP_NAME" | wc -l)
total_bytes=$(find "$OUT" -type f ! -name "$STAMP_NAME" -exec cat {} + | wc -c)
printf '[debian-corpus]   %-22s %3d files %9d bytes\n' "total" "$total_files" "$total_bytes" >&2
echo "$OUT"
