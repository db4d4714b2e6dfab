#!/usr/bin/env bash
# A/B of two tierdb builds under sysbench on a local directory (no MinIO, no PostgreSQL):
# for each workload, each build in turn serves a fresh database, sysbench prepares it and
# runs the workload. Out of CI; for "did this change make the server faster" (issue 28).
#   scripts/ab-oltp-local.sh BEFORE_BIN AFTER_BIN
# Environment: SIZE rows per table (20000), TABLES (4), THREADS (4), T seconds (20),
# WORKLOADS (oltp_read_write oltp_point_select oltp_write_only), PERF=1 records a perf
# profile (call graphs) of each server into /tmp/ab-oltp-<build>-<workload>.perf.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN" >&2; exit 2; }
command -v sysbench >/dev/null || { echo "sysbench is not installed (apt-get install sysbench)" >&2; exit 2; }
SIZE=${SIZE:-20000} TABLES=${TABLES:-4} THREADS=${THREADS:-4} T=${T:-20}
WORKLOADS=${WORKLOADS:-oltp_read_write oltp_point_select oltp_write_only}
PORT=${PORT:-55432}
run_one() { # BIN NAME WORKLOAD
  local dir; dir=$(mktemp -d /tmp/ab-oltp-XXXXXX)
  TIERDB_PASSWORD=ab "$1" serve "$dir/data" --create --listen "127.0.0.1:$PORT" \
    --memory-bytes 64MiB > "$dir/serve.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 150); do (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.2; done
  local sb=(sysbench --db-driver=pgsql --pgsql-host=127.0.0.1 --pgsql-port="$PORT" --pgsql-user=tierdb
            --pgsql-password=ab --pgsql-db=tierdb --tables="$TABLES" --table-size="$SIZE")
  "${sb[@]}" oltp_common --threads="$THREADS" prepare > "$dir/prepare.log" 2>&1
  local pp=""
  if [ -n "${PERF:-}" ]; then
    perf record -F 149 --call-graph dwarf,32768 -p "$sp" -o "/tmp/ab-oltp-$2-$3.perf" -- sleep "$T" \
      > /dev/null 2>&1 & pp=$!
  fi
  local c0 c1; c0=$(awk '{print $14 + $15}' "/proc/$sp/stat")
  local out; out=$("${sb[@]}" "$3" --threads="$THREADS" --time="$T" --report-interval=0 run)
  c1=$(awk '{print $14 + $15}' "/proc/$sp/stat")
  [ -n "$pp" ] && wait "$pp"
  kill "$sp"; wait "$sp" || true
  rm -rf "$dir"
  local tps p95 n cpu
  tps=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' <<< "$out")
  p95=$(sed -n 's/.*95th percentile: *\([0-9.]*\).*/\1/p' <<< "$out")
  n=$(sed -n 's/.*transactions: *\([0-9]*\) *(.*/\1/p' <<< "$out")
  # The server's CPU time per transaction (user + system, clock ticks of 10 ms): steadier
  # than tps on a noisy 2-core machine, where sysbench shares the cores.
  cpu=$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN { printf "%.2f", c * 10 / n }')
  echo "$tps $p95 $cpu"
}
printf '%-20s %12s %12s %8s   %-22s %s\n' workload "before tps" "after tps" ratio \
  "p95 ms before -> after" "server CPU ms/txn before -> after (ratio)"
for w in $WORKLOADS; do
  read -r b_tps b_p95 b_cpu < <(run_one "$1" before "$w")
  read -r a_tps a_p95 a_cpu < <(run_one "$2" after "$w")
  ratio=$(awk -v a="$a_tps" -v b="$b_tps" 'BEGIN { printf "%.2fx", a / b }')
  cratio=$(awk -v a="$a_cpu" -v b="$b_cpu" 'BEGIN { printf "%.2fx", a / b }')
  printf '%-20s %12s %12s %8s   %-22s %s -> %s (%s)\n' "$w" "$b_tps" "$a_tps" "$ratio" \
    "$b_p95 -> $a_p95" "$b_cpu" "$a_cpu" "$cratio"
done
