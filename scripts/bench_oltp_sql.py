"""Seed 001's experiment through SQL: sysbench's oltp_* scripts and pgbench's built-in
tpcb-like and select-only scripts, unmodified, against `tierdb serve` on MinIO with (a) no
device tier, (b) a device tier in write-through, (c) in write-back, and PostgreSQL 15 on
the local disk (fsync on) beside them, in one run. After pgbench's runs the balances it
leaves are checked (accounts, tellers, branches and history sum alike). Prints one table
(tps, p95 latency, errors), writes oltp_sql.csv, oltp_sql.json and oltp_sql.png to --out. Run through scripts/bench-oltp-sql.sh (it builds tierdb, starts
MinIO and sets AWS_*)."""

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from sqlcheck import engines  # noqa: E402

WORKLOADS = ["oltp_read_write", "oltp_point_select", "oltp_write_only"]
PGBENCH_WORKLOADS = ["tpcb-like", "select-only"]
PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
PSQL = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"


def sysbench(port, user, password, db, workload, args, *extra, timeout=7200):
    cmd = ["sysbench", workload, "--db-driver=pgsql", "--pgsql-host=127.0.0.1", f"--pgsql-port={port}",
           f"--pgsql-user={user}", f"--pgsql-password={password}", f"--pgsql-db={db}",
           f"--tables={args.tables}", f"--table-size={args.table_size}", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def parse(out):
    def num(pattern):
        m = re.search(pattern, out)
        return float(m.group(1)) if m else float("nan")
    return {
        "tps": num(r"transactions:\s+\d+\s+\(([\d.]+) per sec"),
        "qps": num(r"queries:\s+\d+\s+\(([\d.]+) per sec"),
        "p95_ms": num(r"95th percentile:\s+([\d.]+)"),
        "errors": int(num(r"ignored errors:\s+(\d+)")),
    }


def run_all(name, port, user, password, db, args, rows):
    t0 = time.time()
    print(f"== {name}: prepare {args.tables} x {args.table_size} rows", flush=True)
    sysbench(port, user, password, db, "oltp_common", args, f"--threads={args.threads}", "prepare")
    print(f"   prepared in {time.time() - t0:.0f} s", flush=True)
    for w in args.workloads:
        out = sysbench(port, user, password, db, w, args, f"--threads={args.threads}",
                       f"--time={args.time}", "--report-interval=0", "run")
        r = parse(out)
        r.update(system=name, workload=w)
        rows.append(r)
        print(f"   {w}: {r['tps']:.1f} tps, p95 {r['p95_ms']} ms, {r['errors']} errors", flush=True)


def pgbench_all(name, port, user, password, db, args, rows):
    """pgbench -i at --pgbench-scale, then each built-in script with -M prepared; the
    balances are checked after the runs (a wrong sum raises: the run is not reported)."""
    env = dict(os.environ, PGPASSWORD=password)
    conn = ["-h", "127.0.0.1", "-p", str(port), "-U", user]

    def run(cmd, timeout=7200):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
        return r.stdout + r.stderr

    t0 = time.time()
    run([PGBENCH, "-i", "-q", "-s", str(args.pgbench_scale), *conn, db])
    print(f"   pgbench -i -s {args.pgbench_scale} in {time.time() - t0:.0f} s", flush=True)
    for w in args.pgbench_workloads:
        # -n: no vacuum before the run; --max-tries retries serialization failures as
        # PostgreSQL's own docs advise (both systems get the same flags).
        out = run([PGBENCH, "-n", "-b", w, "-M", "prepared", "-c", str(args.threads), "-j", str(args.threads),
                   "-T", str(args.time), "--max-tries=10", *conn, db])

        def num(pattern, default=float("nan")):
            m = re.search(pattern, out)
            return float(m.group(1)) if m else default
        r = {"system": name, "workload": f"pgbench {w}",
             "tps": num(r"tps = ([\d.]+) \(without initial connection time\)"),
             "qps": float("nan"),
             "p95_ms": float("nan"),
             "latency_ms": num(r"latency average = ([\d.]+) ms"),
             "errors": int(num(r"number of failed transactions: (\d+)", 0))}
        rows.append(r)
        print(f"   pgbench {w}: {r['tps']:.1f} tps, latency avg {r['latency_ms']} ms, {r['errors']} failed", flush=True)
    sums = run([PSQL, *conn, "-d", db, "-At", "-c",
                "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers), "
                "(SELECT sum(bbalance) FROM pgbench_branches), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)"])
    vals = sums.strip().splitlines()[0].split("|")
    if len(set(vals)) != 1:
        raise RuntimeError(f"{name}: pgbench's balances disagree (accounts, tellers, branches, history): {vals}")
    print(f"   pgbench balances agree: {vals[0]}", flush=True)


def tierdb_serve(binary, url, extra, log):
    port = engines.free_port()
    env = dict(os.environ, TIERDB_PASSWORD=engines.PASSWORD)
    out = open(log, "w")
    p = subprocess.Popen([binary, "serve", url, "--create", "--listen", f"127.0.0.1:{port}", *extra],
                         env=env, stdout=out, stderr=subprocess.STDOUT)
    engines.wait_port(port, p, "tierdb serve", log)
    return p, port


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--bucket", default="bench")
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--time", type=int, default=30)
    ap.add_argument("--memory", default="16MiB", help="tierdb's DRAM tier (keep it under a quarter of the data)")
    ap.add_argument("--cache-bytes", default="4GiB", help="the device tier of (b) and (c)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--pgbench-workloads", default=",".join(PGBENCH_WORKLOADS),
                    help="pgbench built-in scripts to run (empty: none)")
    ap.add_argument("--pgbench-scale", type=int, default=4, help="pgbench -i -s (100,000 accounts per unit)")
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    args.pgbench_workloads = [w for w in args.pgbench_workloads.split(",") if w]
    os.makedirs(args.out, exist_ok=True)
    rows = []
    work = tempfile.mkdtemp(prefix="tierdb-oltp-sql-")
    stamp = int(time.time())
    configs = [
        ("tierdb (a) MinIO, no device tier", []),
        ("tierdb (b) MinIO + device, write-through", ["--cache-bytes", args.cache_bytes, "--write-mode", "write-through"]),
        ("tierdb (c) MinIO + device, write-back", ["--cache-bytes", args.cache_bytes, "--write-mode", "write-back"]),
    ]
    try:
        with engines.postgres(fsync=True, extra="-c shared_buffers=128MB") as pg:
            run_all("PostgreSQL 15, local disk (fsync on)", pg, "postgres", "", "postgres", args, rows)
            if args.pgbench_workloads:
                pgbench_all("PostgreSQL 15, local disk (fsync on)", pg, "postgres", "", "postgres", args, rows)
        for i, (name, extra) in enumerate(configs):
            cache = os.path.join(work, f"cache{i}")
            os.makedirs(cache)
            url = f"s3://{args.bucket}/oltp-sql-{stamp}-{i}"
            opts = ["--memory-bytes", args.memory, *extra]
            if "--cache-bytes" in extra:
                opts += ["--cache-dir", cache]
            p, port = tierdb_serve(args.tierdb, url, opts, os.path.join(work, f"serve{i}.log"))
            try:
                run_all(name, port, "tierdb", engines.PASSWORD, "tierdb", args, rows)
                if args.pgbench_workloads:
                    pgbench_all(name, port, "tierdb", engines.PASSWORD, "tierdb", args, rows)
            finally:
                p.terminate()
                p.wait(timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(rows, args)


def report(rows, args):
    systems = list(dict.fromkeys(r["system"] for r in rows))
    pg = {r["workload"]: r["tps"] for r in rows if r["system"].startswith("PostgreSQL")}
    a = {r["workload"]: r["tps"] for r in rows if "(a)" in r["system"]}
    print(f"\nsysbench {args.tables} x {args.table_size} rows and pgbench scale {args.pgbench_scale}, "
          f"{args.threads} threads, {args.time} s each; tierdb DRAM tier {args.memory}")
    head = (f"{'system':44} {'workload':20} {'tps':>9} {'p95 ms':>8} {'avg ms':>8} {'errors':>7} "
            f"{'vs PG':>6} {'vs (a)':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        vs_pg = r["tps"] / pg[r["workload"]] if pg.get(r["workload"]) else float("nan")
        vs_a = r["tps"] / a[r["workload"]] if a.get(r["workload"]) else float("nan")
        r["vs_postgres"], r["vs_a"] = vs_pg, vs_a
        r.setdefault("latency_ms", 1000.0 * args.threads / r["tps"] if r["tps"] else float("nan"))
        p95 = f"{r['p95_ms']:8.2f}" if r["p95_ms"] == r["p95_ms"] else f"{'-':>8}"
        print(f"{r['system']:44} {r['workload']:20} {r['tps']:9.1f} {p95} {r['latency_ms']:8.2f} {r['errors']:7d} "
              f"{vs_pg:6.2f} {vs_a:7.2f}")
    print("(p95: sysbench's 95th percentile; avg: pgbench's latency average, and for sysbench threads / tps;"
          " errors: sysbench's ignored errors, pgbench's failed transactions after retries)")
    keys = ["system", "workload", "tps", "qps", "p95_ms", "latency_ms", "errors", "vs_postgres", "vs_a"]
    with open(os.path.join(args.out, "oltp_sql.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in keys})
    with open(os.path.join(args.out, "oltp_sql.json"), "w") as f:
        json.dump(rows, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no PNG)")
        return
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / max(1, len(systems))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    for i, s in enumerate(systems):
        ys = [next((r["tps"] for r in rows if r["system"] == s and r["workload"] == w), 0) for w in workloads]
        ax.bar([x + i * width for x in range(len(workloads))], ys, width, label=s)
    ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(workloads))])
    ax.set_xticklabels(workloads, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("transactions per second (log scale)")
    ax.set_title(f"sysbench ({args.tables} x {args.table_size} rows) and pgbench (scale {args.pgbench_scale}) "
                 f"through SQL, {args.threads} threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "oltp_sql.png"), dpi=120)
    print(f"wrote {args.out}/oltp_sql.csv, .json, .png")


if __name__ == "__main__":
    main()
