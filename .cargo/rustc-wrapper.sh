#!/bin/sh
# qdrant-edge 0.9 uses `assert_matches`, stable only from Rust 1.96: allow that one feature for that one crate.
rustc="$1"; shift
case " $* " in
  *" --crate-name qdrant_edge "*) RUSTC_BOOTSTRAP=qdrant_edge exec "$rustc" "$@" -Zcrate-attr='feature(assert_matches)' ;;
  *) exec "$rustc" "$@" ;;
esac
