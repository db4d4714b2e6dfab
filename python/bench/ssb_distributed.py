"""The Star Schema Benchmark in one process and spread over worker processes: tierdb's
coordinator (`tierdb bench ssb --workers …`) with N local `tierdb worker` processes, on
the same database, against the same queries run by one process.

For each worker count of --workers (0 is one process): start the workers (each a follower
with its own DRAM tier, on a free port), run the 13 queries (warm, best of --runs after a
warming run), stop the workers and read what each one did (bytes its queries read, bytes
its tiers fetched from the object store, CPU seconds), and check every answer against the
one-process answers (exit 1 if one differs).

On one machine the workers share its cores: the wall time is then no estimate of N
machines. The CPU seconds of the coordinator and of each worker are printed beside it, and
the busiest process's CPU time bounds what N machines would take (docs/benchmarks.md).

Writes distributed.json (and a table on stdout) to --out. --check-only: one run, answers
only (CI: SF 0.1, 2 workers).
"""

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ssb_compare import queries, run, tierdb_bench, tierdb_load  # noqa: E402


def start_workers(tierdb, db, n, threads, extra):
    """n `tierdb worker` processes on free ports; returns [(process, "host:port")]."""
    workers = []
    for _ in range(n):
        p = subprocess.Popen([tierdb, "worker", db, "--listen", "127.0.0.1:0", "--threads", str(threads), *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.match(r"tierdb worker listening on (\S+)", line)
        if not m:
            p.kill()
            raise SystemExit(f"worker did not start: {line}{p.stderr.read()}")
        workers.append((p, m.group(1)))
    return workers


def stop_workers(workers):
    """SIGTERM each worker; returns the JSON line each prints as it stops."""
    out = []
    for p, _ in workers:
        p.send_signal(signal.SIGTERM)
    for p, addr in workers:
        try:
            rest, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            raise SystemExit(f"worker {addr} did not stop within 120 s of SIGTERM")
        if p.returncode != 0:
            raise SystemExit(f"worker {addr} exited with {p.returncode}: {err}")
        out.append(json.loads(rest.strip().splitlines()[-1]))
    return out


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--data", required=True, help="directory of the generated .tbl files")
    ap.add_argument("--db", required=True, help="database URL (loaded when it has no lineorder)")
    ap.add_argument("--workers", default="0,2,3", help="worker counts to run, 0 = one process")
    ap.add_argument("--threads", type=int, default=2, help="threads of every process")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load-args", default="", help="extra arguments for `tierdb ssb load` "
                    "(e.g. '--segment-rows 150000': more segments to split at a small SF)")
    ap.add_argument("--worker-args", default="", help="extra arguments for each `tierdb worker`")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--check-only", action="store_true", help="one run, answers only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data = Path(a.data)
    if not list(data.glob("lineorder.tbl*")):
        run([a.tierdb, "ssb", "generate", "--sf", a.sf, data, "--chunks", max(a.threads, 2)])
    probe = subprocess.run([a.tierdb, "sql", a.db, "--read-only", "-c", "SELECT count(*) FROM lineorder"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        tierdb_load(a.tierdb, a.db, data, a.threads, extra=a.load_args.split())
    names = [n for n, _ in queries(a.tierdb)]
    runs = 1 if a.check_only else a.runs
    counts = [int(x) for x in a.workers.split(",")]
    if 0 not in counts:
        counts.insert(0, 0)
    results, answers, failed = {}, {}, []
    for n in counts:
        tag = f"{n}-workers" if n else "1-process"
        print(f"== {tag}", flush=True)
        workers = start_workers(a.tierdb, a.db, n, a.threads, a.worker_args.split()) if n else []
        extra = ["--workers", ",".join(addr for _, addr in workers)] if workers else []
        cpu0, wall0 = children_cpu(), time.perf_counter()
        try:
            rows, answers[tag] = tierdb_bench(a.tierdb, a.db, a.threads, runs, a.out, f"distributed-{tag}", extra)
        finally:
            summaries = stop_workers(workers)
        # The workers are children too: their CPU is subtracted to leave the coordinator's.
        cpu = children_cpu() - cpu0 - sum(s["cpu_seconds"] for s in summaries)
        results[tag] = {
            "workers": n,
            "seconds": {q: float(rows[q]["seconds"]) for q in names},
            "total_seconds": sum(float(rows[q]["seconds"]) for q in names),
            "coordinator_bytes_read": sum(int(rows[q]["bytes_read"]) for q in names),
            "coordinator_cpu_seconds": cpu,
            "elapsed_seconds": time.perf_counter() - wall0,
            "worker_summaries": summaries,
        }
        if n:
            for q in names:
                if answers[tag][q] != answers["1-process"][q]:
                    failed.append(f"{tag} {q}")

    print(f"\nSSB SF {a.sf}, {a.threads} threads per process, best of {runs} warm runs; "
          "worker CPU and bytes are over all runs, the warming run included")
    head = f"{'':<12} {'total s':>8} {'vs 1':>6} {'coord CPU s':>12}  per worker: bytes its queries read, from the object store, CPU s"
    print(head)
    base = results["1-process"]["total_seconds"]
    for tag, r in results.items():
        per = "; ".join(f"{s['query_bytes'] / 1e6:.0f} MB, {s['object_store_bytes'] / 1e6:.0f} MB, "
                        f"{s['cpu_seconds']:.1f} s" for s in r["worker_summaries"]) or "-"
        print(f"{tag:<12} {r['total_seconds']:8.3f} {r['total_seconds'] / base:5.2f}x "
              f"{r['coordinator_cpu_seconds']:12.1f}  {per}")
    print(f"\n{'query':<6}" + "".join(f"{t:>12}" for t in results))
    for q in names:
        print(f"{q:<6}" + "".join(f"{r['seconds'][q]:12.3f}" for r in results.values()))
    with open(Path(a.out) / "distributed.json", "w") as f:
        json.dump({"sf": a.sf, "threads": a.threads, "runs": runs, "results": results,
                   "mismatches": failed}, f, indent=1)
    if failed:
        print("answers differ from one process's: " + ", ".join(failed))
        return 1
    print(f"every answer of {', '.join(t for t in results if t != '1-process')} equals the one-process answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
