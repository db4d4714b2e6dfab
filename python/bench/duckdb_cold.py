"""DuckDB with httpfs reading tierdb's segment files straight from object storage, cold:
each query in a fresh in-memory DuckDB instance (no file or metadata cache carried over).

Run with a Python whose duckdb is 1.5.5 and which has duckdb-extension-httpfs 1.5.5 (the
extension is LOADed by its path: nothing is downloaded). Reads a JSON job on stdin:
  {"endpoint": "127.0.0.1:9000", "key": ..., "secret": ..., "region": ...,
   "threads": 2, "tables": {"lineorder": ["s3://bucket/.../x.parquet", ...], ...},
   "queries": [["Q1.1", "SELECT ..."], ...]}
and prints one JSON object: {"Q1.1": {"seconds": s, "rows": [[...], ...]}, ...}.
"""

import json
import sys
import time
from pathlib import Path

import duckdb
import duckdb_extension_httpfs


def httpfs_path():
    root = Path(duckdb_extension_httpfs.__file__).parent
    found = sorted(root.rglob("httpfs.duckdb_extension"))
    if not found:
        raise SystemExit(f"no httpfs.duckdb_extension under {root}")
    return str(found[0])


def connect(job, ext):
    con = duckdb.connect()
    con.execute(f"SET threads = {int(job['threads'])}")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute(f"LOAD '{ext}'")
    con.execute(
        "CREATE SECRET minio (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false)"
        .replace("?", "'{}'").format(job["key"], job["secret"], job["region"], job["endpoint"])
    )
    for table, files in job["tables"].items():
        listed = ", ".join(f"'{f}'" for f in files)
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{listed}])")
    return con


def main():
    job = json.load(sys.stdin)
    ext = httpfs_path()
    out = {}
    for name, sql in job["queries"]:
        con = connect(job, ext)
        started = time.perf_counter()
        rows = con.execute(sql).fetchall()
        seconds = time.perf_counter() - started
        con.close()
        out[name] = {"seconds": seconds, "rows": [[str(v) if v is not None else None for v in r] for r in rows]}
    json.dump({"duckdb": duckdb.__version__, "results": out}, sys.stdout)


if __name__ == "__main__":
    main()
