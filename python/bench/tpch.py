"""TPC-H, tierdb beside DuckDB and plain DataFusion on the same data, with the same thread
count, as a new user would run it: `tpchgen-cli` writes the .tbl files, `tierdb import`
loads them (file order, no sort key: the layout DuckDB's COPY gives), the 22 queries with
the specification's validation parameters (`tpch_queries/`, as DuckDB's tpch extension
prints them) run on each engine.

Steps (each prints what it measured):
  1. `tpchgen-cli -s SF` into --data (kept: rerunning reuses the files);
  2. import: `tierdb import` of each table against DuckDB's COPY of the same files;
  3. the 22 queries warm (best of --runs after a warming run) on: DuckDB native; plain
     DataFusion (its defaults, a listing table per table over tierdb's own segment files:
     `tierdb bench queries --plain-datafusion`); tierdb (`tierdb bench queries`). Every
     answer is checked against DuckDB's; with --duckdb-tpch (SF 0.01, 0.1 or 1) tierdb also
     answers on DuckDB's own dbgen data, checked against the extension's `tpch_answers()`;
  4. with --s3-url (e.g. MinIO): tierdb cold from object storage (empty DRAM tier, no device
     tier, a fresh open per query), and DuckDB + httpfs reading the same segment files from
     the object store, a fresh DuckDB per query (`duckdb_cold.py`; needs
     duckdb-extension-httpfs, loaded by path).

Writes tpch.csv, tpch.json and tpch.png to --out and exits 1 if an answer differs.
The module's functions are shared with python/tests/test_tpch.py (CI: SF 0.01, answers
only, through `tierdb serve`).
"""

import argparse
import csv
import io
import json
import math
import os
import re
import shutil
import sys
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ssb_compare import bar_plot, best_of, run  # noqa: E402  (shared with the SSB comparison)
QUERY_DIR = HERE / "tpch_queries"

# The tables with the column types DuckDB's own TPC-H generator gives them (`CALL dbgen`),
# so both engines compare the same types. File order: no sort key.
SCHEMA = {
    "region": "r_regionkey INTEGER NOT NULL, r_name VARCHAR NOT NULL, r_comment VARCHAR NOT NULL",
    "nation": "n_nationkey INTEGER NOT NULL, n_name VARCHAR NOT NULL, n_regionkey INTEGER NOT NULL, "
              "n_comment VARCHAR NOT NULL",
    "supplier": "s_suppkey BIGINT NOT NULL, s_name VARCHAR NOT NULL, s_address VARCHAR NOT NULL, "
                "s_nationkey INTEGER NOT NULL, s_phone VARCHAR NOT NULL, s_acctbal DECIMAL(15,2) NOT NULL, "
                "s_comment VARCHAR NOT NULL",
    "customer": "c_custkey BIGINT NOT NULL, c_name VARCHAR NOT NULL, c_address VARCHAR NOT NULL, "
                "c_nationkey INTEGER NOT NULL, c_phone VARCHAR NOT NULL, c_acctbal DECIMAL(15,2) NOT NULL, "
                "c_mktsegment VARCHAR NOT NULL, c_comment VARCHAR NOT NULL",
    "part": "p_partkey BIGINT NOT NULL, p_name VARCHAR NOT NULL, p_mfgr VARCHAR NOT NULL, "
            "p_brand VARCHAR NOT NULL, p_type VARCHAR NOT NULL, p_size INTEGER NOT NULL, "
            "p_container VARCHAR NOT NULL, p_retailprice DECIMAL(15,2) NOT NULL, p_comment VARCHAR NOT NULL",
    "partsupp": "ps_partkey BIGINT NOT NULL, ps_suppkey BIGINT NOT NULL, ps_availqty BIGINT NOT NULL, "
                "ps_supplycost DECIMAL(15,2) NOT NULL, ps_comment VARCHAR NOT NULL",
    "orders": "o_orderkey BIGINT NOT NULL, o_custkey BIGINT NOT NULL, o_orderstatus VARCHAR NOT NULL, "
              "o_totalprice DECIMAL(15,2) NOT NULL, o_orderdate DATE NOT NULL, "
              "o_orderpriority VARCHAR NOT NULL, o_clerk VARCHAR NOT NULL, o_shippriority INTEGER NOT NULL, "
              "o_comment VARCHAR NOT NULL",
    "lineitem": "l_orderkey BIGINT NOT NULL, l_partkey BIGINT NOT NULL, l_suppkey BIGINT NOT NULL, "
                "l_linenumber BIGINT NOT NULL, l_quantity DECIMAL(15,2) NOT NULL, "
                "l_extendedprice DECIMAL(15,2) NOT NULL, l_discount DECIMAL(15,2) NOT NULL, "
                "l_tax DECIMAL(15,2) NOT NULL, l_returnflag VARCHAR NOT NULL, l_linestatus VARCHAR NOT NULL, "
                "l_shipdate DATE NOT NULL, l_commitdate DATE NOT NULL, l_receiptdate DATE NOT NULL, "
                "l_shipinstruct VARCHAR NOT NULL, l_shipmode VARCHAR NOT NULL, l_comment VARCHAR NOT NULL",
}

# Numbers agree when within this relative difference (or REL * 1 near zero): engines may
# compute an average or a quotient of decimals in binary floating point or in decimal.
REL = 1e-6


def tpchgen():
    """The tpchgen-cli beside this Python (pip package `tpchgen-cli`), else on PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli")
    return found


def generate(sf, data):
    """The .tbl files of scale factor `sf` in `data`; made once (a marker file says done)."""
    data = Path(data)
    done = data / ".complete"
    if done.exists():
        return data
    data.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run([tpchgen(), "-s", sf, "--output-dir", data])
    done.write_text(f"{sf}\n")
    print(f"generated TPC-H SF {sf} in {time.perf_counter() - started:.1f} s", flush=True)
    return data


def queries():
    """[(name, sql)] for the 22 queries, q01 … q22."""
    found = sorted(QUERY_DIR.glob("q*.sql"))
    assert len(found) == 22, found
    return [(p.stem, p.read_text().strip().rstrip(";")) for p in found]


def create_statements():
    return [f"CREATE TABLE {t} ({cols})" for t, cols in SCHEMA.items()]


def tierdb_load(tierdb, db, data, threads, extra=()):
    """Creates the tables and imports each table's .tbl file; returns (rows, seconds)."""
    run([tierdb, "sql", db, "--create", *extra, "-c", "; ".join(create_statements())])
    rows, seconds = 0, 0.0
    for table in SCHEMA:
        started = time.perf_counter()
        out = run([tierdb, "import", db, table, Path(data) / f"{table}.tbl", "--format", "tbl",
                   "--threads", threads, "--max-rejects", "0", *extra])
        seconds += time.perf_counter() - started
        m = re.search(r"(\d+) rows", out)
        rows += int(m.group(1)) if m else 0
    return rows, seconds


def duckdb_load(con, data, threads):
    """The same tables in DuckDB, loaded with COPY in file order; returns seconds."""
    con.execute(f"SET threads = {threads}")
    seconds = 0.0
    for table, cols in SCHEMA.items():
        con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute(f"CREATE TABLE {table} ({cols})")
        started = time.perf_counter()
        con.execute(f"COPY {table} FROM '{Path(data) / (table + '.tbl')}' (DELIMITER '|', HEADER false)")
        con.execute("CHECKPOINT")
        seconds += time.perf_counter() - started
    return seconds


def value(v):
    """One answer value in a form both engines' values compare in: numbers as float,
    dates as ISO text, text as is (a CSV answer's fields are parsed as numbers or dates)."""
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    if isinstance(v, date):
        return v.isoformat()
    s = str(v)
    try:
        return float(s)
    except ValueError:
        return s


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL, abs_tol=REL)
    return a == b


def compare(name, got, want):
    """Problems (empty when equal): the rows in the query's order, values by `same`."""
    got = [tuple(value(v) for v in r) for r in got]
    want = [tuple(value(v) for v in r) for r in want]
    if len(got) != len(want):
        return [f"{name}: {len(got)} rows, expected {len(want)}"]
    problems = []
    for i, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(w) or not all(same(x, y) for x, y in zip(g, w)):
            problems.append(f"{name} row {i + 1}: {g} expected {w}")
            if len(problems) >= 3:
                break
    return problems


def duckdb_answers(con, qs, runs=1):
    """({name: best seconds}, {name: rows}) for the queries in DuckDB."""
    times, answers = {}, {}
    for name, sql in qs:
        if runs > 1:
            con.execute(sql).fetchall()  # a warming run, as `tierdb bench` makes
        times[name], answers[name] = best_of(con, sql, runs)
    return times, answers


def parse_answer(text):
    """The rows of one `tpch_answers()` answer: a header line, then '|'-separated rows, each
    ended by a newline (an empty field is NULL: Q17's 'avg_yearly\\n\\n' is one NULL row)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [tuple(line.split("|")) for line in lines[1:]]


def reference_answers(con, extension, sf):
    """{name: rows} from the tpch extension's `tpch_answers()` (only SF 0.01, 0.1 and 1
    are in it). They are the answers on the data of DuckDB's own `dbgen`, whose text
    columns differ from tpchgen-cli's: compare them with answers on that data."""
    con.execute(f"LOAD '{extension}'")
    rows = con.execute("SELECT query_nr, answer FROM tpch_answers() WHERE scale_factor = ?", [sf]).fetchall()
    return {f"q{nr:02d}": parse_answer(text) for nr, text in rows}


def dbgen_export(con, extension, sf, out):
    """DuckDB's own TPC-H data (`CALL dbgen`) written to `out` as .tbl files (with dbgen's
    trailing '|'), for checking an engine against `tpch_answers()`; returns those answers
    ({name: rows}; none, and no files, at a scale factor they are not given for)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    answers = reference_answers(con, extension, sf)
    if not answers:
        return answers
    con.execute(f"CALL dbgen(sf = {sf})")
    for table in SCHEMA:
        con.execute(f"COPY (SELECT *, '' FROM {table}) TO '{out / (table + '.tbl')}' "
                    "(DELIMITER '|', HEADER false, QUOTE '')")
        con.execute(f"DROP TABLE {table}")
    return answers


def bench_answers(path):
    """{name: rows} from a `tierdb bench … --answers` file (CSV after `-- name` lines)."""
    answers, name = {}, None
    for line in Path(path).read_text().splitlines():
        if line.startswith("-- "):
            name = line[3:]
            answers[name] = []
        elif line:
            answers[name].append(tuple(next(csv.reader(io.StringIO(line)))))
    return answers


def tierdb_bench(tierdb, db, threads, runs, out, tag, extra=()):
    """`tierdb bench queries` over the 22 files: ({name: seconds}, {name: rows}, figures)."""
    csv_path = Path(out) / f"tpch-{tag}.csv"
    ans_path = Path(out) / f"tpch-{tag}.answers"
    files = []
    for p in sorted(QUERY_DIR.glob("q*.sql")):
        files += ["--file", p]
    text = run([tierdb, "bench", "queries", db, *files, "--threads", threads, "--runs", runs,
                "--csv", csv_path, "--answers", ans_path, *extra])
    print(text, flush=True)
    figures = {r["query"]: r for r in csv.DictReader(open(csv_path))}
    return ({k: float(r["seconds"]) for k, r in figures.items()}, bench_answers(ans_path), figures)


# Each TPC-H table by its columns' prefix (the first column of a segment names the table).
PREFIX_TABLE = {"r": "region", "n": "nation", "s": "supplier", "c": "customer", "p": "part",
                "ps": "partsupp", "o": "orders", "l": "lineitem"}


def duckdb_cold(cold_db, threads, qs):
    """DuckDB + httpfs reading the cold database's segment files straight from the object
    store, each query in a fresh in-memory DuckDB (`duckdb_cold.py`, its own process):
    ({name: seconds}, {name: rows}). The files are found by listing the database's
    `tables/*/*.parquet` and naming each file's table by its first column."""
    import subprocess
    import duckdb_cold as dc
    endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1]
    job = {"endpoint": endpoint, "key": os.environ["AWS_ACCESS_KEY_ID"],
           "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
           "region": os.environ.get("AWS_REGION", "us-east-1"), "threads": threads,
           "tables": {}, "queries": [list(q) for q in qs]}
    con = dc.connect(job, dc.httpfs_path())
    files = [r[0] for r in con.execute(
        f"SELECT file FROM glob('{cold_db.rstrip('/')}/tables/*/*.parquet') ORDER BY file").fetchall()]
    for f in files:
        first = con.execute(f"SELECT name FROM parquet_schema('{f}') LIMIT 1 OFFSET 1").fetchone()[0]
        job["tables"].setdefault(PREFIX_TABLE[first.split("_")[0]], []).append(f)
    con.close()
    missing = sorted(set(PREFIX_TABLE.values()) - set(job["tables"]))
    if missing:
        raise SystemExit(f"DuckDB cold: no segment files of {missing} under {cold_db}/tables")
    p = subprocess.run([sys.executable, str(HERE / "duckdb_cold.py")], input=json.dumps(job),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"DuckDB cold run failed: {p.stderr}")
    res = json.loads(p.stdout)["results"]
    return ({n: r["seconds"] for n, r in res.items()}, {n: r["rows"] for n, r in res.items()})


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--sf", default="1")
    ap.add_argument("--data", required=True, help="directory of the generated .tbl files")
    ap.add_argument("--work", required=True, help="directory for the databases")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--s3-url", help="object store URL for the cold run (e.g. MinIO)")
    ap.add_argument("--duckdb-tpch", help="path of DuckDB's tpch extension (tpch_answers())")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--variant", action="append", default=[], metavar="TAG=FLAGS",
                    help="another warm tierdb column with these `tierdb bench queries` flags "
                         "(space-separated), e.g. no_reduce=--no-semi-join-reduction: what a "
                         "planner rule buys, measured in the same run")
    args = ap.parse_args()

    import duckdb

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = generate(args.sf, args.data)
    qs = queries()
    names = [n for n, _ in qs]

    con = duckdb.connect(str(work / "tpch.duckdb"))
    duck_load = duckdb_load(con, data, args.threads)
    db = str(work / "tierdb")
    rows, tier_load = tierdb_load(args.tierdb, db, data, args.threads)
    mb = sum((Path(data) / f"{t}.tbl").stat().st_size for t in SCHEMA) / 1e6
    print(f"\nimport of {mb:.0f} MB ({rows} rows): DuckDB COPY {duck_load:.1f} s, tierdb import "
          f"{tier_load:.1f} s ({mb / tier_load:.1f} MB/s): {tier_load / duck_load:.2f}x DuckDB\n", flush=True)

    duck_t, duck_a = duckdb_answers(con, qs, args.runs)
    problems = []
    if args.duckdb_tpch:
        # The specification's answers are for DuckDB's dbgen data (text differs from
        # tpchgen-cli's): tierdb loads that too and answers once on it.
        spec_data = work / "dbgen"
        reference = dbgen_export(duckdb.connect(), args.duckdb_tpch, float(args.sf), spec_data)
        if reference:
            spec_db = str(work / "tierdb-dbgen")
            tierdb_load(args.tierdb, spec_db, spec_data, args.threads)
            _, got, _ = tierdb_bench(args.tierdb, spec_db, args.threads, 1, out, "spec")
            for n in names:
                problems += ["tierdb vs tpch_answers(): " + p for p in compare(n, got[n], reference[n])]
        else:
            print(f"(tpch_answers() has no answers for SF {args.sf}: only 0.01, 0.1 and 1)")
    con.close()

    columns = {"duckdb": duck_t}
    figures = {}
    variants = [("datafusion", ["--plain-datafusion"]), ("tierdb", [])]
    for v in args.variant:
        tag, _, flags = v.partition("=")
        variants.append((tag, flags.split()))
    for tag, extra in variants:
        t, a, f = tierdb_bench(args.tierdb, db, args.threads, args.runs, out, tag, extra)
        columns[tag] = t
        figures[tag] = f
        for n in names:
            problems += [f"{tag}: " + p for p in compare(n, a[n], duck_a[n])]
    if args.s3_url:
        cold_db = args.s3_url.rstrip("/") + f"/tpch-sf{args.sf}-{os.getpid()}"
        tierdb_load(args.tierdb, cold_db, data, args.threads)
        t, a, f = tierdb_bench(args.tierdb, cold_db, args.threads, 1, out, "cold", ["--cold"])
        columns["tierdb_cold"] = t
        figures["tierdb_cold"] = f
        for n in names:
            problems += ["cold: " + p for p in compare(n, a[n], duck_a[n])]
        t, a = duckdb_cold(cold_db, args.threads, qs)
        columns["duckdb_httpfs_cold"] = t
        for n in names:
            problems += ["DuckDB httpfs cold: " + p for p in compare(n, a[n], duck_a[n])]

    heads = list(columns)
    # Column widths fit the longest heading (duckdb_httpfs_cold) with a space before it.
    wt = {h: max(13, len(h) + 1) for h in heads}
    wx = {h: max(15, len(h) + 3) for h in heads}
    print(f"TPC-H SF {args.sf}, {args.threads} threads, best of {args.runs} warm runs (cold "
          f"columns: one run, fresh process or instance per query; seconds; x = time / DuckDB's)")
    print(f"{'query':<10}" + "".join(f"{h:>{wt[h]}}" for h in heads)
          + "".join(f"{h + ' x':>{wx[h]}}" for h in heads[1:]))
    for n in names:
        line = f"{n:<10}" + "".join(f"{columns[h][n]:>{wt[h]}.4f}" for h in heads)
        line += "".join(f"{columns[h][n] / columns['duckdb'][n]:>{wx[h]}.2f}" for h in heads[1:])
        print(line)
    total = {h: sum(columns[h].values()) for h in heads}
    print(f"{'total':<10}" + "".join(f"{total[h]:>{wt[h]}.4f}" for h in heads)
          + "".join(f"{total[h] / total['duckdb']:>{wx[h]}.2f}" for h in heads[1:]))
    print(f"{'geomean x':<10}" + "".join(" " * wt[h] for h in heads)
          + "".join(f"{geomean([columns[h][n] / columns['duckdb'][n] for n in names]):>{wx[h]}.2f}"
                    for h in heads[1:]))
    if "tierdb_cold" in columns:
        print(f"cold / warm (tierdb): {total['tierdb_cold'] / total['tierdb']:.2f}x; tierdb cold / "
              f"DuckDB + httpfs cold: {total['tierdb_cold'] / total['duckdb_httpfs_cold']:.2f}x")

    with open(out / "tpch.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query", *heads])
        for n in names:
            w.writerow([n, *(columns[h][n] for h in heads)])
    (out / "tpch.json").write_text(json.dumps({
        "sf": args.sf, "threads": args.threads, "runs": args.runs,
        "import_seconds": {"duckdb": duck_load, "tierdb": tier_load},
        "seconds": columns, "figures": figures, "problems": problems,
    }, indent=1))
    bar_plot(names, {h: [columns[h][n] for n in names] for h in heads},
             f"TPC-H SF {args.sf}, {args.threads} threads", out / "tpch.png")
    if problems:
        print("\nanswers differ:\n  " + "\n  ".join(problems))
        return 1
    print("\nevery answer equals DuckDB's" + (" (and on dbgen's data tpch_answers())" if args.duckdb_tpch else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
