#!/usr/bin/env bash
# The first run: builds the release binary once (into $CARGO_TARGET_DIR, default
# ~/.cache/tierdb/target), then shows tierdb's jobs on the embedded default (a local
# directory as the capacity store, a cache directory as the device tier, no MinIO):
#   1. SQL: SSB data generated and imported (progress bar), queries cold then warm, with
#      time, bytes read, bytes from the capacity store and segments skipped per query;
#   2. key-value: a commit, a zero-copy clone, `tierdb info` as a table;
#   3. ZODB: a transaction through tierdb.zodb.TierStorage (the Python package is built
#      first when it is not: ZODB and maturin from pip, the native module in release into
#      the same target directory), then `tierdb zodb stats`;
#   4. the tiers' statistics.
#   scripts/demo.sh [SCALE-FACTOR]   (default 0.05: about 300,000 lineorder rows)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/tierdb/target}
SF=${1:-0.05}
tierdb=$CARGO_TARGET_DIR/release/tierdb
started=$(date +%s)
cargo build --release --locked -p tierdb-cli
echo "== release build: $(( $(date +%s) - started )) s (nothing to do when it was built before)"

work=$(mktemp -d -t tierdb-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
cache="$work/cache"
tiers=(--cache-dir "$cache" --cache-bytes 256MiB --memory-bytes 64MiB)

echo
echo "== 1. SQL: the Star Schema Benchmark at scale factor $SF"
"$tierdb" ssb generate --sf "$SF" "$work/ssb"
"$tierdb" ssb load "$work/warehouse" "$work/ssb" --create "${tiers[@]}"
"$tierdb" sql "$work/warehouse" "${tiers[@]}" -c "
  SELECT d_year, sum(lo_revenue) AS revenue
  FROM lineorder JOIN date ON lo_orderdate = d_datekey
  GROUP BY d_year ORDER BY d_year"
echo "-- cold: each query on freshly opened, empty DRAM and device tiers"
"$tierdb" bench ssb "$work/warehouse" --cold --queries Q1.1,Q2.1,Q3.1,Q4.1 "${tiers[@]}"
echo "-- warm: the same queries again, served from the tiers (best of 3)"
"$tierdb" bench ssb "$work/warehouse" --queries Q1.1,Q2.1,Q3.1,Q4.1 "${tiers[@]}"

echo
echo "== 2. key-value: a commit, a zero-copy clone, info"
"$tierdb" kv put "$work/kv" greeting "hello from tierdb" --create
"$tierdb" clone "$work/kv" "$work/kv-copy"
"$tierdb" kv put "$work/kv-copy" greeting "hello from the clone"
echo "source: $("$tierdb" kv get "$work/kv" greeting)"
echo "clone:  $("$tierdb" kv get "$work/kv-copy" greeting)"
"$tierdb" info "$work/kv-copy"

echo
echo "== 3. ZODB: a transaction through TierStorage"
python=${TIERDB_PYTHON:-$HOME/.cache/tierdb/venv/bin/python}
if ! { [ -x "$python" ] && "$python" -c "import tierdb.zodb, ZODB" 2>/dev/null; } \
    && [ -z "${TIERDB_PYTHON:-}" ] && python3 -c "import venv" 2>/dev/null; then
  # The Python package's native module, built in release into the same target directory
  # as the binary above (it shares the storage crates' build), in the venv that
  # scripts/python-env.sh fills with the test dependencies too.
  built=$(date +%s)
  venv=$HOME/.cache/tierdb/venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check ZODB "maturin>=1.5,<2"
  (cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop -q --release)
  python=$venv/bin/python
  echo "== Python package built: $(( $(date +%s) - built )) s"
fi
if [ -x "$python" ] && "$python" -c "import tierdb.zodb, ZODB" 2>/dev/null; then
  "$python" - "$work/zodb" <<'EOF'
import sys, transaction, ZODB
from persistent.mapping import PersistentMapping
from tierdb.zodb import TierStorage
db = ZODB.DB(TierStorage(sys.argv[1], create=True))
with db.transaction() as conn:
    conn.root.accounts = PersistentMapping({"alice": 100, "bob": 50})
with db.transaction() as conn:
    conn.root.accounts["alice"] -= 30
    conn.root.accounts["bob"] += 30
with db.transaction() as conn:
    print("committed; accounts now", dict(conn.root.accounts))
print("history of the root object:", len(db.history(b"\0" * 8, size=10)), "revisions")
db.close()
EOF
  "$tierdb" zodb stats "$work/zodb"
else
  echo "(skipped: the Python package could not be built: python3 with venv and pip is needed; scripts/python-env.sh builds it into ~/.cache/tierdb/venv)"
fi

echo
echo "== 4. the warehouse and its tiers after the SQL runs (statistics the last process left in the cache directory)"
"$tierdb" info "$work/warehouse" --cache-dir "$cache"
echo
echo "== the capacity store is plain files:"
find "$work/warehouse" -type f | sed "s|$work/||" | sort | head -12
echo "== demo done in $(( $(date +%s) - started )) s"
