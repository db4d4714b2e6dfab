"""The Star Schema Benchmark, tierdb against DuckDB and plain DataFusion, in one run on the
same data, with the same thread count.

Steps (each prints what it measured):
  1. `tierdb ssb generate --sf SF DIR` (kept: rerunning reuses DIR's files);
  2. import, four ways from the same .tbl files: `tierdb ssb load` (sorted on ingest by
     tierdb's keys: lineorder by lo_orderdate, dimensions by their keys), `tierdb ssb load
     --unsorted`, DuckDB's COPY (file order), and DuckDB `INSERT INTO … SELECT … FROM
     read_csv(…) ORDER BY` the same keys (DuckDB keeps insertion order, so its table is laid
     out in the same order as tierdb's);
  3. the 13 queries warm (best of --runs after a warming run) on: DuckDB native, sorted the
     same way as tierdb; DuckDB native, unsorted; plain DataFusion (its defaults, a listing
     table over tierdb's own segment files: `tierdb bench ssb --plain-datafusion`); tierdb
     sorted and tierdb unsorted. Every answer is checked against DuckDB's (rows compared as
     multisets, numbers exactly). All engines get the same column types (`tierdb ssb schema`);
  4. bytes read per query with and without extent elimination;
  5. with --s3-url (e.g. MinIO) and not --check-only: tierdb cold from object storage (empty
     DRAM tier, no device tier, a fresh open per query) against DuckDB cold (a fresh
     connection per query).

Writes ssb.csv, ssb.json and ssb.png (per-query times) to --out. Exits 1 if an answer
differs. --check-only: SF small, one run, answers only (CI). --import-only: step 2 alone, with
the sorted load also run with DataFusion's sort and one-thread merge (--no-parallel-sort).
"""

import argparse
import csv
import io
import json
import os
import re
import shutil
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


def sort_keys(tierdb):
    """{table: "col, …"}: tierdb's ingest order per table (from the sorted schema)."""
    keys = {}
    for stmt in [x.strip() for x in run([tierdb, "ssb", "schema", "--sorted"]).split(";") if x.strip()]:
        m = re.match(r"CREATE TABLE (\w+).*ORDER BY \((.*)\)\s*$", stmt, re.S)
        if m:
            keys[m.group(1)] = m.group(2)
    return keys


def duckdb_load(tierdb, con, data, threads, keys=None):
    """Creates the tables from tierdb's schema (the same column types) and loads the .tbl
    files: with COPY in file order, or with `keys` ({table: sort key}) by INSERT … SELECT
    … FROM read_csv(…) ORDER BY the key. Returns seconds (load and CHECKPOINT)."""
    con.execute(f"SET threads = {threads}")
    con.execute("SET preserve_insertion_order = true")
    schema = run([tierdb, "ssb", "schema"])
    seconds = 0.0
    for stmt in [s.strip() for s in schema.split(";") if s.strip()]:
        table = re.match(r"CREATE TABLE (\w+)", stmt).group(1)
        con.execute(f"DROP TABLE IF EXISTS {table}")
        files = sorted(str(p) for p in Path(data).glob(f"{table}.tbl*"))
        if keys:
            con.execute(stmt)
            cols = con.execute(f'DESCRIBE "{table}"').fetchall()
            # dbgen ends each line with '|': one extra, empty column, not selected.
            spec = ", ".join(f"'{c[0]}': '{c[1]}'" for c in cols) + ", 'dbgen_end': 'VARCHAR'"
            names = ", ".join(c[0] for c in cols)
            started = time.perf_counter()
            sql = (f'INSERT INTO "{table}" SELECT {names} FROM read_csv({files!r}, '
                   f"delim = '|', header = false, columns = {{{spec}}}) ORDER BY {keys[table]}")
            con.execute(sql)
        else:
            # dbgen ends each line with '|': one extra, empty column, dropped after the load.
            con.execute(stmt[: stmt.rindex(")")] + ", dbgen_end VARCHAR)")
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


def best_of(con, sql, runs):
    """(best seconds of `runs` runs, the rows) of one DuckDB query."""
    best, rows = None, None
    for _ in range(max(runs, 1)):
        started = time.perf_counter()
        rows = con.execute(sql).fetchall()
        t = time.perf_counter() - started
        best = t if best is None else min(best, t)
    return best, rows


def duckdb_run(con, qs, runs):
    times, answers = {}, {}
    for name, sql in qs:
        times[name], rows = best_of(con, sql, runs)
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


def tierdb_load(tierdb, db, data, threads, unsorted=False, extra=()):
    args = [tierdb, "ssb", "load", db, data, "--create", "--threads", threads, *extra]
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


COLUMNS = [
    # (key, heading)
    ("duckdb_sorted", "duck sorted"),
    ("duckdb_unsorted", "duck unsort"),
    ("datafusion", "DataFusion"),
    ("tierdb_sorted", "tierdb"),
    ("tierdb_unsorted", "tierdb uns"),
    ("duckdb_cold", "duck cold"),
    ("tierdb_cold_minio", "MinIO cold"),
]


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
    ap.add_argument("--load-args", default="", help="extra arguments for `tierdb ssb load` "
                    "(e.g. '--segment-codec lz4 --row-group-rows 1048576')")
    ap.add_argument("--import-only", action="store_true",
                    help="print the import table (with the sorted load also by DataFusion's "
                    "sort, --no-parallel-sort) and stop")
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
    names = [n for n, _ in qs]
    runs = 1 if a.check_only else a.runs
    load_args = a.load_args.split()

    print(f"== import, SF {a.sf}: {tbl_bytes / 1e6:.1f} MB of .tbl files, {a.threads} threads", flush=True)
    imports = {}
    sorted_db = str(Path(a.work) / "ssb-sorted")
    rows, imports["tierdb sorted (ssb load)"] = tierdb_load(a.tierdb, sorted_db, data, a.threads,
                                                           extra=load_args)
    if a.import_only:
        # The same load with DataFusion's per-partition sort and one-thread merge: what the
        # parallel in-memory sort (parsort.rs) buys, in this invocation.
        ab_db = str(Path(a.work) / "ssb-sorted-df")
        _, imports["tierdb sorted, --no-parallel-sort"] = tierdb_load(
            a.tierdb, ab_db, data, a.threads, extra=[*load_args, "--no-parallel-sort"])
        shutil.rmtree(ab_db, ignore_errors=True)
    unsorted_db = str(Path(a.work) / "ssb-unsorted")
    if not a.check_only:
        _, imports["tierdb unsorted (ssb load --unsorted)"] = tierdb_load(
            a.tierdb, unsorted_db, data, a.threads, unsorted=True, extra=load_args)
    con_u = duckdb.connect(str(Path(a.work) / "ssb-unsorted.duckdb"))
    imports["DuckDB COPY (file order)"] = duckdb_load(a.tierdb, con_u, data, a.threads)
    con_s = duckdb.connect(str(Path(a.work) / "ssb-sorted.duckdb"))
    imports["DuckDB INSERT … ORDER BY (sorted)"] = duckdb_load(a.tierdb, con_s, data, a.threads,
                                                               keys=sort_keys(a.tierdb))
    copy = imports["DuckDB COPY (file order)"]
    print(f"\nimport of {rows:,} rows ({tbl_bytes / 1e6:.1f} MB of .tbl), {a.threads} threads")
    print(f"{'':<40} {'seconds':>8} {'MB/s':>7} {'rows/s':>11} {'vs COPY':>8}")
    for k, t in imports.items():
        print(f"{k:<40} {t:8.2f} {tbl_bytes / 1e6 / t:7.1f} {rows / t:11,.0f} {t / copy:7.2f}x")
    print(flush=True)
    if a.import_only:
        return

    results = {n: {} for n in names}
    answers = {}
    print("== warm: DuckDB sorted like tierdb", flush=True)
    t, answers["duckdb_sorted"] = duckdb_run(con_s, qs, runs)
    for n in names:
        results[n]["duckdb_sorted"] = t[n]
    print("== warm: DuckDB unsorted", flush=True)
    t, answers["duckdb_unsorted"] = duckdb_run(con_u, qs, runs)
    for n in names:
        results[n]["duckdb_unsorted"] = t[n]
    print("== warm: plain DataFusion over tierdb's segment files", flush=True)
    df, answers["datafusion"] = tierdb_bench(a.tierdb, sorted_db, a.threads, runs, a.out, "datafusion",
                                             ["--plain-datafusion"])
    print("== warm: tierdb, sorted", flush=True)
    warm, answers["tierdb_sorted"] = tierdb_bench(a.tierdb, sorted_db, a.threads, runs, a.out, "warm-sorted")
    for n in names:
        results[n]["datafusion"] = float(df[n]["seconds"])
        results[n]["tierdb_sorted"] = float(warm[n]["seconds"])
        results[n]["bytes_read"] = int(warm[n]["bytes_read"])
        results[n]["segments"] = int(warm[n]["segments"])
        results[n]["segments_skipped"] = int(warm[n]["segments_skipped"])
    if not a.check_only:
        print("== warm: tierdb, loaded unsorted", flush=True)
        uns, answers["tierdb_unsorted"] = tierdb_bench(a.tierdb, unsorted_db, a.threads, runs, a.out,
                                                       "warm-unsorted")
        for n in names:
            results[n]["tierdb_unsorted"] = float(uns[n]["seconds"])
    want = answers["duckdb_sorted"]
    bad = []
    for engine, ans in answers.items():
        for n in names:
            if ans.get(n) != want.get(n):
                bad.append((engine, n))
                print(f"{n}: {engine}'s answer differs from DuckDB's\n  {engine}: {ans.get(n, [])[:5]}\n"
                      f"  duckdb: {want.get(n, [])[:5]}")
    ok = sum(1 for n in names if answers["tierdb_sorted"].get(n) == want.get(n))
    print(f"{ok} of 13 answers match DuckDB's"
          + ("" if bad else f" (and every answer of {', '.join(k for k in answers if k != 'duckdb_sorted')})"),
          flush=True)
    if bad:
        sys.exit(1)
    print("== bytes read without extent elimination", flush=True)
    no_ee, _ = tierdb_bench(a.tierdb, sorted_db, a.threads, 1, a.out, "warm-no-extent-elimination",
                            ["--no-extent-elimination"])
    for n in names:
        results[n]["bytes_read_no_ee"] = int(no_ee[n]["bytes_read"])
    if a.s3_url and not a.check_only:
        print("== cold from object storage", flush=True)
        s3_db = a.s3_url.rstrip("/") + f"/ssb-{os.getpid()}"
        tierdb_load(a.tierdb, s3_db, data, a.threads, extra=load_args)
        cold, c_answers = tierdb_bench(a.tierdb, s3_db, a.threads, 1, a.out, "cold-minio",
                                       ["--cold", "--cache-bytes", "0"])
        assert all(c_answers[n] == want[n] for n in names), "cold answers differ"
        con_s.close()
        for n, sql in qs:
            c = duckdb.connect(str(Path(a.work) / "ssb-sorted.duckdb"), read_only=True)
            c.execute(f"SET threads = {a.threads}")
            started = time.perf_counter()
            c.execute(sql).fetchall()
            results[n]["duckdb_cold"] = time.perf_counter() - started
            results[n]["tierdb_cold_minio"] = float(cold[n]["seconds"])
            results[n]["bytes_from_minio"] = int(cold[n]["capacity_bytes"])
            c.close()

    cols = [k for k, _ in COLUMNS if any(k in r for r in results.values())]
    extra = [c for c in ["bytes_read", "bytes_read_no_ee", "bytes_from_minio", "segments",
                         "segments_skipped"] if any(c in r for r in results.values())]
    with open(Path(a.out) / "ssb.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query"] + cols + extra)
        for n in names:
            w.writerow([n] + [results[n].get(c, "") for c in cols + extra])
    totals = {c: sum(results[n][c] for n in names) for c in cols}
    with open(Path(a.out) / "ssb.json", "w") as f:
        json.dump({"sf": a.sf, "threads": a.threads, "runs": runs, "imports": imports,
                   "queries": results, "totals": totals}, f, indent=1)
    print()
    print(f"SSB SF {a.sf}, {a.threads} threads, warm seconds (best of {runs}); "
          f"ratios: tierdb / plain DataFusion, tierdb / DuckDB sorted the same way")
    heads = dict(COLUMNS)
    print(f"{'query':<6}" + "".join(f" {heads[c]:>11}" for c in cols)
          + f" {'/DataFusion':>11} {'/duck same':>10}")
    for n in names + ["total"]:
        r = totals if n == "total" else results[n]
        print(f"{n:<6}" + "".join(f" {r[c]:11.3f}" for c in cols)
              + f" {r['tierdb_sorted'] / r['datafusion']:10.2f}x"
              + f" {r['tierdb_sorted'] / r['duckdb_sorted']:9.2f}x")
    if "tierdb_cold_minio" in cols:
        print(f"cold: tierdb from MinIO / DuckDB cold from its file: "
              f"{totals['tierdb_cold_minio'] / totals['duckdb_cold']:.2f}x")
    over = [f"{n} {results[n]['tierdb_sorted'] / results[n]['duckdb_sorted']:.1f}x" for n in names
            if results[n]["tierdb_sorted"] > 2 * results[n]["duckdb_sorted"]]
    print("queries above 2x DuckDB (same sort order): " + (", ".join(over) if over else "none"))
    print(f"{'bytes read':<18}" + f"{sum(results[n]['bytes_read'] for n in names):>14,}"
          + f"   without extent elimination {sum(results[n]['bytes_read_no_ee'] for n in names):,}")
    if not a.check_only:
        bar_plot(names, {heads[s]: [results[n][s] for n in names] for s in cols},
                 f"SSB SF {a.sf}, {a.threads} threads: warm seconds per query", Path(a.out) / "ssb.png")


if __name__ == "__main__":
    main()
