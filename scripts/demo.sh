#!/usr/bin/env bash
# A demo on the embedded default (a local directory, no MinIO): write-back through a device
# cache directory, read back, list, show the tiers' statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
tierdb=$CARGO_TARGET_DIR/release/tierdb
[ -x "$tierdb" ] || cargo build --release -p tierdb-cli
work=$(mktemp -d -t tierdb-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
db="$work/db"; cache="$work/cache"
tiers=(--cache-dir "$cache" --cache-bytes 64MiB --memory-bytes 16MiB --write-mode write-back)
echo "== database $db, cache $cache (write-back)"
head -c 1000000 /dev/urandom > "$work/blob"
"$tierdb" store put "$db" demo/blob "$work/blob" "${tiers[@]}"
echo "hello from tierdb" | "$tierdb" store put "$db" demo/hello "${tiers[@]}"
echo "== get demo/hello"
"$tierdb" store get "$db" demo/hello "${tiers[@]}"
"$tierdb" store get "$db" demo/blob -o "$work/blob.out" "${tiers[@]}"
cmp "$work/blob" "$work/blob.out" && echo "== demo/blob read back identical (1 MB)"
echo "== ls demo"
"$tierdb" store ls "$db" demo "${tiers[@]}"
echo "== the capacity store itself (plain files)"
find "$db" -type f | sed "s|$work/||"
echo "== stat"
"$tierdb" store stat "$db" "${tiers[@]}" | head -40
