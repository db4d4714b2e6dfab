#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/) out of CI: every decoder of bytes from disk, network
# or a user. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...] (default 1800 s, all);
# a target stops after 10 million inputs or its seconds, whichever comes first.
# New inputs that reach new code are kept in fuzz/corpus/<target>/ (commit them: CI
# replays the corpus through the same entry points); a crash is written to
# fuzz/artifacts/<target>/ and ends the run non-zero. Needs a nightly toolchain
# (rustup toolchain install nightly) and cargo-fuzz (cargo install cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_PER=${1:-1800}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(filestorage object_records pickle_refs wblog catalog copy_text copy_binary row_value)
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/tierdb/fuzz-target}
for t in "${TARGETS[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  echo "== fuzz $t for ${SECONDS_PER}s"
  # -rss_limit_mb: an input that makes a decoder allocate without bound is a crash too.
  # New inputs go to corpus/<target>; seeds/<target> (hand-made, valid) is read only.
  cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$SECONDS_PER" \
    -runs=10000000 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 \
    | { grep -E "^(stat::|==)|Done|crash|panicked|SUMMARY" || true; } | tail -20
done
