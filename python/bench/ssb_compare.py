"""The Star Schema Benchmark, tierdb against DuckDB, in one run on the same data.

Steps (each prints what it measured):
  1. `tierdb ssb generate --sf SF DIR` (kept: rerunning reuses DIR's files);
  2. import: `tierdb ssb load` (sorted on ingest) against DuckDB's COPY of the same .tbl files;
  3. the 13 queries warm (best of --runs) on both, with the same thread count; every answer
     is checked against DuckDB's (rows compared as multisets, numbers exactly);
  4. bytes read per query with and without extent elimination;
  5. unless --check-only: the same warm on tables loaded unsorted, and (with --s3-url, e.g.
     MinIO) tierdb cold from object storage (empty DRAM tier, no device tier, a fresh open
     per query) against DuckDB cold (a fresh connection per query).

Writes ssb.csv and ssb.png (per-query times) to --out. Exits 1 if an answer differs.
"""

import argparse
import csv
import io
import os
import re
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import duckdb


def run(cmd, **kw):
    print("$", " ".join(str(c) for c in cmd), flush=True)
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"command failed with exit code {p.returncode}: {cmd[:3]}")
    return p.stdout


def queries(tierdb):
    out = run([tierdb, "ssb", "queries"])
    found = re.findall(r"-- (Q\d\.\d)\n(.*?);\n", out, re.S)
    assert len(found) == 13, out
    return found


def duckdb_load(tierdb, con, data, threads):
    """Creates the tables from tierdb's schema and COPYs the .tbl files; returns seconds."""
    con.execute(f"SET threads = {threads}")
    schema = run([tierdb, "ssb", "schema"])
    seconds = 0.0
    for stmt in [s.strip() for s in schema.split(";") if s.strip()]:
        table = re.match(r"CREATE TABLE (\w+)", stmt).group(1)
        con.execute(f"DROP TABLE IF EXISTS {table}")
        # dbgen ends each line with '|': one extra, empty column, dropped after the load.
        con.execute(stmt[: stmt.rindex(")")] + ", dbgen_end VARCHAR)")
        files = sorted(str(p) for p in Path(data).glob(f"{table}.tbl*"))
        started = time.perf_counter()
        for f in files:
            con.execute(f"COPY {table} FROM '{f}' (DELIMITER '|', HEADER false)")
        con.execute(f"ALTER TABLE {table} DROP COLUMN dbgen_end")
        con.execute("CHECKPOINT")
        seconds += time.perf_counter() - started
    return seconds


def norm(v):
    if v is None or v == "":
        return None
    if isinstance(v, (int, Decimal)):
        return int(v) if v == int(v) else float(v)
    if isinstance(v, float):
        return round(v, 6)
    s = str(v)
    for conv in (int, float):
        try:
            return norm(conv(s))
        except ValueError:
            pass
    return s


def duckdb_run(con, qs, runs):
    times, answers = {}, {}
    for name, sql in qs:
        best = None
        for _ in range(max(runs, 1)):
            started = time.perf_counter()
            rows = con.execute(sql).fetchall()
            t = time.perf_counter() - started
            best = t if best is None else min(best, t)
        times[name] = best
        answers[name] = sorted(tuple(norm(v) for v in r) for r in rows)
    return times, answers


def tierdb_bench(tierdb, db, threads, runs, out, tag, extra=()):
    csv_path = Path(out) / f"ssb-{tag}.csv"
    ans_path = Path(out) / f"ssb-{tag}.answers"
    text = run([tierdb, "bench", "ssb", db, "--threads", threads, "--runs", runs,
                "--csv", csv_path, "--answers", ans_path, *extra])
    print(text, flush=True)
    rows = {r["query"]: r for r in csv.DictReader(open(csv_path))}
    answers, name = {}, None
    for line in open(ans_path).read().splitlines():
        if line.startswith("-- "):
            name = line[3:]
            answers[name] = []
        elif line:
            answers[name].append(tuple(norm(v) for v in next(csv.reader(io.StringIO(line)))))
    return rows, {k: sorted(v) for k, v in answers.items()}


def tierdb_load(tierdb, db, data, threads, unsorted=False):
    args = [tierdb, "ssb", "load", db, data, "--create", "--threads", threads]
    if unsorted:
        args.append("--unsorted")
    text = run(args)
    print(text, flush=True)
    m = re.search(r"SSB loaded .*?: (\d+) rows, .*? in ([\d.]+) s", text)
    return int(m.group(1)), float(m.group(2))


def bar_plot(names, series, title, path):
    """Seconds per query as grouped bars, one group per query and one bar per series
    ({label: [seconds per name]}), written to `path` (skipped without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names)
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--data", required=True, help="directory of the generated .tbl files")
    ap.add_argument("--work", required=True, help="directory for the databases")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--s3-url", help="object store URL for the cold run (e.g. MinIO)")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--check-only", action="store_true",
                    help="generate, load, run once and compare answers; no further runs")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    data = Path(a.data)
    if not list(data.glob("lineorder.tbl*")):
        run([a.tierdb, "ssb", "generate", "--sf", a.sf, data, "--chunks", max(a.threads, 2)])
    tbl_bytes = sum(p.stat().st_size for p in data.glob("*.tbl*"))
    qs = queries(a.tierdb)

    print(f"== import, SF {a.sf}: {tbl_bytes / 1e6:.1f} MB of .tbl files, {a.threads} threads", flush=True)
    sorted_db = str(Path(a.work) / "ssb-sorted")
    rows, t_load = tierdb_load(a.tierdb, sorted_db, data, a.threads)
    con = duckdb.connect(str(Path(a.work) / "ssb.duckdb"))
    t_copy = duckdb_load(a.tierdb, con, data, a.threads)
    print(f"import: tierdb {rows} rows in {t_load:.2f} s ({rows / t_load:,.0f} rows/s, "
          f"{tbl_bytes / 1e6 / t_load:.1f} MB/s, sorted on ingest); DuckDB COPY {t_copy:.2f} s "
          f"({rows / t_copy:,.0f} rows/s, {tbl_bytes / 1e6 / t_copy:.1f} MB/s); "
          f"tierdb/DuckDB time {t_load / t_copy:.2f}x", flush=True)

    runs = 1 if a.check_only else a.runs
    print("== warm, sorted", flush=True)
    warm, t_answers = tierdb_bench(a.tierdb, sorted_db, a.threads, runs, a.out, "warm-sorted")
    duck_warm, d_answers = duckdb_run(con, qs, runs)
    bad = [n for n, _ in qs if t_answers.get(n) != d_answers.get(n)]
    for n in bad:
        print(f"{n}: answers differ\n  tierdb: {t_answers.get(n)[:5]}\n  duckdb: {d_answers.get(n)[:5]}")
    print(f"{13 - len(bad)} of 13 answers match DuckDB's", flush=True)
    if bad:
        sys.exit(1)
    print("== bytes read without extent elimination", flush=True)
    no_ee, _ = tierdb_bench(a.tierdb, sorted_db, a.threads, 1, a.out, "warm-no-extent-elimination",
                            ["--no-extent-elimination"])
    results = {n: {"duckdb_warm": duck_warm[n], "tierdb_warm_sorted": float(warm[n]["seconds"]),
                   "bytes_read": int(warm[n]["bytes_read"]),
                   "bytes_read_no_ee": int(no_ee[n]["bytes_read"]),
                   "segments": int(warm[n]["segments"]),
                   "segments_skipped": int(warm[n]["segments_skipped"])} for n, _ in qs}
    if not a.check_only:
        print("== warm, loaded unsorted", flush=True)
        unsorted_db = str(Path(a.work) / "ssb-unsorted")
        tierdb_load(a.tierdb, unsorted_db, data, a.threads, unsorted=True)
        unsorted, u_answers = tierdb_bench(a.tierdb, unsorted_db, a.threads, runs, a.out, "warm-unsorted")
        assert all(u_answers[n] == d_answers[n] for n, _ in qs), "unsorted answers differ"
        for n, _ in qs:
            results[n]["tierdb_warm_unsorted"] = float(unsorted[n]["seconds"])
        if a.s3_url:
            print("== cold from object storage", flush=True)
            s3_db = a.s3_url.rstrip("/") + f"/ssb-{os.getpid()}"
            tierdb_load(a.tierdb, s3_db, data, a.threads)
            cold, c_answers = tierdb_bench(a.tierdb, s3_db, a.threads, 1, a.out, "cold-minio",
                                           ["--cold", "--cache-bytes", "0"])
            assert all(c_answers[n] == d_answers[n] for n, _ in qs), "cold answers differ"
            con.close()
            for n, sql in qs:
                c = duckdb.connect(str(Path(a.work) / "ssb.duckdb"), read_only=True)
                c.execute(f"SET threads = {a.threads}")
                started = time.perf_counter()
                c.execute(sql).fetchall()
                results[n]["duckdb_cold"] = time.perf_counter() - started
                results[n]["tierdb_cold_minio"] = float(cold[n]["seconds"])
                results[n]["bytes_from_minio"] = int(cold[n]["capacity_bytes"])
                c.close()

    cols = ["duckdb_warm", "tierdb_warm_sorted", "tierdb_warm_unsorted", "duckdb_cold",
            "tierdb_cold_minio", "bytes_read", "bytes_read_no_ee", "bytes_from_minio",
            "segments", "segments_skipped"]
    cols = [c for c in cols if any(c in r for r in results.values())]
    with open(Path(a.out) / "ssb.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query"] + cols)
        for n, _ in qs:
            w.writerow([n] + [results[n].get(c, "") for c in cols])
    print()
    print(f"SSB SF {a.sf}, {a.threads} threads; seconds (ratio = tierdb / DuckDB, lower is better)")
    head = f"{'query':<6} {'duckdb':>8} {'sorted':>8} {'ratio':>6}"
    if "tierdb_warm_unsorted" in cols:
        head += f" {'unsorted':>8} {'ratio':>6}"
    if "tierdb_cold_minio" in cols:
        head += f" {'duck cold':>9} {'MinIO cold':>10} {'ratio':>6}"
    head += f" {'bytes read':>12} {'no extent elim':>14}"
    print(head)
    sums = {}
    for n, _ in qs:
        r = results[n]
        for k, v in r.items():
            sums[k] = sums.get(k, 0) + v
        line = f"{n:<6} {r['duckdb_warm']:8.3f} {r['tierdb_warm_sorted']:8.3f} {r['tierdb_warm_sorted'] / r['duckdb_warm']:6.2f}"
        if "tierdb_warm_unsorted" in r:
            line += f" {r['tierdb_warm_unsorted']:8.3f} {r['tierdb_warm_unsorted'] / r['duckdb_warm']:6.2f}"
        if "tierdb_cold_minio" in r:
            line += f" {r['duckdb_cold']:9.3f} {r['tierdb_cold_minio']:10.3f} {r['tierdb_cold_minio'] / r['duckdb_cold']:6.2f}"
        line += f" {r['bytes_read']:12d} {r['bytes_read_no_ee']:14d}"
        print(line)
    line = f"{'total':<6} {sums['duckdb_warm']:8.3f} {sums['tierdb_warm_sorted']:8.3f} {sums['tierdb_warm_sorted'] / sums['duckdb_warm']:6.2f}"
    if "tierdb_warm_unsorted" in sums:
        line += f" {sums['tierdb_warm_unsorted']:8.3f} {sums['tierdb_warm_unsorted'] / sums['duckdb_warm']:6.2f}"
    if "tierdb_cold_minio" in sums:
        line += f" {sums['duckdb_cold']:9.3f} {sums['tierdb_cold_minio']:10.3f} {sums['tierdb_cold_minio'] / sums['duckdb_cold']:6.2f}"
    line += f" {sums['bytes_read']:12d} {sums['bytes_read_no_ee']:14d}"
    print(line)
    if not a.check_only:
        names = [n for n, _ in qs]
        series = [c for c in ["duckdb_warm", "tierdb_warm_sorted", "tierdb_warm_unsorted",
                              "duckdb_cold", "tierdb_cold_minio"] if c in cols]
        bar_plot(names, {s.replace("_", " "): [results[n][s] for n in names] for s in series},
                 f"SSB SF {a.sf}, {a.threads} threads: tierdb vs DuckDB", Path(a.out) / "ssb.png")


if __name__ == "__main__":
    main()
