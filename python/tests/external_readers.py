"""Reads a tierdb table as a Delta table with engines that are not tierdb, and compares
every row with what tierdb answered (a CSV file with a header).

Runs in the readers' environment (scripts/python-env.sh makes it: duckdb 1.5.5 with its
delta and httpfs extensions loaded from their pip packages by path, offline, and
`deltalake`, delta-rs's Python package). Exits 1 if an engine's rows differ; prints one line per engine.

  external_readers.py TABLE_URI EXPECTED.csv [--engines duckdb,deltalake]

TABLE_URI is a directory or s3://bucket/path (AWS_ENDPOINT_URL etc. from the environment).
"""

import argparse
import csv
import datetime
import decimal
import os
import sys
from pathlib import Path


def norm(v):
    """One spelling per value, whoever read it."""
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, (int, float, decimal.Decimal)):
        return repr(float(v))
    s = str(v)
    try:
        return repr(float(s))
    except ValueError:
        return s


def rows_of(table):
    """A pyarrow table's rows as sorted tuples of normalized values."""
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(tuple(norm(c[i]) for c in cols) for i in range(table.num_rows))


def s3_options():
    return {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        "AWS_ALLOW_HTTP": "true",
    }


def load_extension(con, package, name):
    """LOADs the extension a pip package ships, by path (nothing is downloaded)."""
    import duckdb
    module = __import__(package)
    ext = next(Path(module.__file__).parent.glob(f"extensions/v{duckdb.__version__}/{name}.duckdb_extension"))
    con.execute(f"LOAD '{ext}'")


def read_duckdb(uri):
    import duckdb
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    if uri.startswith("s3://"):
        load_extension(con, "duckdb_extension_httpfs", "httpfs")
        endpoint = os.environ["AWS_ENDPOINT_URL"].split("://", 1)
        con.execute(f"""CREATE SECRET minio (TYPE s3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}',
            SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}', REGION '{os.environ.get("AWS_REGION", "us-east-1")}',
            ENDPOINT '{endpoint[1]}', URL_STYLE 'path', USE_SSL {str(endpoint[0] == "https").lower()})""")
    load_extension(con, "duckdb_extension_delta", "delta")
    try:
        return rows_of(con.execute(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table())
    finally:
        con.close()


def read_deltalake(uri):
    from deltalake import DeltaTable
    options = s3_options() if uri.startswith("s3://") else None
    return rows_of(DeltaTable(uri, storage_options=options).to_pyarrow_table())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("uri")
    ap.add_argument("expected")
    ap.add_argument("--engines", default="duckdb,deltalake")
    a = ap.parse_args()
    with open(a.expected) as f:
        expected = sorted(tuple(norm(v) for v in r) for r in list(csv.reader(f))[1:])
    failed = False
    for engine in a.engines.split(","):
        got = {"duckdb": read_duckdb, "deltalake": read_deltalake}[engine](a.uri)
        same = got == expected
        failed |= not same
        print(f"{engine}: {len(got)} rows, {'equal to' if same else 'DIFFERENT from'} tierdb's {len(expected)}")
        if not same:
            print("  only in", engine, sorted(set(got) - set(expected))[:5])
            print("  only in tierdb", sorted(set(expected) - set(got))[:5])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
