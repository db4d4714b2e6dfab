"""The read path at SSB scale (issue 12): one database, the same Parquet segment files, read
five ways in one run, with the same thread count:

  direct     the same plans reading the files straight from the local disk, with none of
             tierdb's store layers (no tiers, no checksum check): the floor for our layers;
  warm       tierdb on MinIO, data in the DRAM and device tiers (best of --runs after a
             warming run; the device tier is sized to hold the data);
  cold       tierdb on MinIO, each query on a fresh open with empty DRAM and device tiers;
  restarted  a new process with the device tier the warm run left, each query once;
  duckdb     DuckDB 1.5.5 with httpfs reading the same files from the same MinIO, each query
             in a fresh instance (cold).

It also measures MinIO's own throughput for large parallel ranged GETs of the same files
(`tierdb bench throughput`): the physical limit for cold reads. The database is loaded once
into a local directory and its files copied byte for byte to MinIO under the same path.
Answers of every tierdb run are checked against the direct run's, and DuckDB's too.

Writes ssb-readpath.csv, ssb-readpath.json and ssb-readpath.png to --out.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ssb_compare import bar_plot, norm, queries, run, tierdb_bench  # noqa: E402


def du(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def upload(tierdb, local, bucket_url):
    """Copies every file of the database at `local` to the bucket under the same path."""
    files = sorted(p for p in Path(local).rglob("*") if p.is_file())
    for f in files:
        key = str(f.resolve())[1:]
        p = subprocess.run([tierdb, "store", "put", bucket_url, key, str(f)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"cannot upload {f}: {p.stderr.strip()}")
    return len(files)


def segment_tables(duck_py, local):
    """{table: [segment file paths relative to /]} read from each segment's first column."""
    code = (
        "import duckdb, json, sys, pathlib\n"
        "out = {}\n"
        "prefixes = {'lo': 'lineorder', 'c': 'customer', 's': 'supplier', 'p': 'part', 'd': 'date'}\n"
        "for f in sorted(pathlib.Path(sys.argv[1]).glob('tables/*/*.parquet')):\n"
        "    cols = [r[0] for r in duckdb.sql(f\"SELECT name FROM parquet_schema('{f}')\").fetchall()]\n"
        "    table = prefixes[cols[1].split('_')[0]]\n"
        "    out.setdefault(table, []).append(str(f.resolve())[1:])\n"
        "print(json.dumps(out))\n"
    )
    return json.loads(run([duck_py, "-c", code, local]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--duckdb-python", required=True, help="a Python with duckdb 1.5.5 and its httpfs extension")
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bucket", required=True, help="s3://bucket (MinIO, AWS_* set)")
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--cold-variant", action="append", default=[], metavar="TAG=FLAGS",
                    help="another cold run with these extra tierdb flags (e.g. "
                         "'blk64k=--block-bytes 64KiB'), printed beside the cold run")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    data = Path(a.data)
    if not list(data.glob("lineorder.tbl*")):
        run([a.tierdb, "ssb", "generate", "--sf", a.sf, data, "--chunks", max(a.threads, 2)])
    qs = queries(a.tierdb)
    t = str(a.threads)

    local = work / "ssb-readpath"
    print(f"== read path, SSB SF {a.sf}, {a.threads} threads: load into {local}", flush=True)
    print(run([a.tierdb, "ssb", "load", local, data, "--create", "--threads", t]), flush=True)
    s3_db = a.bucket.rstrip("/") + "/" + str(local)[1:]
    n = upload(a.tierdb, local, a.bucket)
    seg_bytes = du(local / "tables")
    print(f"copied {n} files ({du(local) / 2**20:.0f} MiB, segments {seg_bytes / 2**20:.0f} MiB) to {s3_db}", flush=True)

    raw = json.loads(run([a.tierdb, "bench", "throughput", s3_db, "--json"]))
    raw_mibs = raw["bytes"] / 2**20 / raw["seconds"]
    print(f"MinIO raw: {raw['bytes'] / 2**20:.0f} MiB in {raw['requests']} GETs of 8 MiB, "
          f"16 at once: {raw['seconds']:.2f} s, {raw_mibs:.0f} MiB/s", flush=True)

    device = str(max(4 << 30, 2 * seg_bytes))
    runs, answers = {}, {}
    print("== direct: local files, no store layers", flush=True)
    runs["direct"], answers["direct"] = tierdb_bench(
        a.tierdb, str(local), t, str(a.runs), a.out, "readpath-direct", ["--direct-files"])
    cold_dir = work / "cache-cold"
    print("== cold: MinIO, empty DRAM and device tiers per query", flush=True)
    runs["cold"], answers["cold"] = tierdb_bench(
        a.tierdb, s3_db, t, "1", a.out, "readpath-cold",
        ["--cold", "--cache-dir", cold_dir, "--cache-bytes", device])
    variants = {}
    for v in a.cold_variant:
        tag, _, flags = v.partition("=")
        print(f"== cold ({tag}: {flags}): MinIO, empty DRAM and device tiers per query", flush=True)
        variants[tag] = tierdb_bench(
            a.tierdb, s3_db, t, "1", a.out, f"readpath-cold-{tag}",
            ["--cold", "--cache-dir", work / f"cache-cold-{tag}", "--cache-bytes", device,
             *flags.split()])
    warm_dir = work / "cache-warm"
    print("== warm: MinIO through the DRAM and device tiers", flush=True)
    runs["warm"], answers["warm"] = tierdb_bench(
        a.tierdb, s3_db, t, str(a.runs), a.out, "readpath-warm",
        ["--cache-dir", warm_dir, "--cache-bytes", device])
    print("== restarted: a new process on the warm run's device tier", flush=True)
    runs["restarted"], answers["restarted"] = tierdb_bench(
        a.tierdb, s3_db, t, "1", a.out, "readpath-restarted",
        ["--once", "--cache-dir", warm_dir, "--cache-bytes", device])

    print("== DuckDB httpfs, cold from MinIO", flush=True)
    tables = segment_tables(a.duckdb_python, local)
    bucket = a.bucket.split("://", 1)[1].strip("/")
    job = {
        "endpoint": os.environ["AWS_ENDPOINT_URL"].split("://", 1)[1],
        "key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region": os.environ.get("AWS_REGION", "us-east-1"), "threads": a.threads,
        "tables": {k: [f"s3://{bucket}/{p}" for p in v] for k, v in tables.items()},
        "queries": qs,
    }
    p = subprocess.run([a.duckdb_python, str(Path(__file__).parent / "duckdb_cold.py")],
                       input=json.dumps(job), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"DuckDB run failed: {p.stderr}")
    duck = json.loads(p.stdout)
    print(f"DuckDB {duck['duckdb']}", flush=True)

    bad = []
    for name, _ in qs:
        want = answers["direct"][name]
        for k in ("cold", "warm", "restarted"):
            if answers[k].get(name) != want:
                bad.append(f"{name} {k}")
        for tag, (_, ans) in variants.items():
            if ans.get(name) != want:
                bad.append(f"{name} cold-{tag}")
        got = sorted(tuple(norm(v) for v in r) for r in duck["results"][name]["rows"])
        if got != want:
            bad.append(f"{name} duckdb")
    if bad:
        print("answers differ: " + ", ".join(bad))
        sys.exit(1)
    print("every answer equals the direct run's (DuckDB's too)", flush=True)

    names = [n for n, _ in qs]
    sec = {k: {n: float(runs[k][n]["seconds"]) for n in names} for k in runs}
    sec["duckdb"] = {n: duck["results"][n]["seconds"] for n in names}
    cold_bytes = {n: int(runs["cold"][n]["capacity_bytes"]) for n in names}
    # What the queries asked the store for (Parquet footers, pages, column chunks).
    cold_read = {n: int(runs["cold"][n]["bytes_read"]) for n in names}
    cold_gets = {n: int(runs["cold"][n]["capacity_gets"]) for n in names}
    cold_heads = {n: int(runs["cold"][n]["capacity_heads"]) for n in names}
    rest_bytes = {n: int(runs["restarted"][n]["capacity_bytes"]) for n in names}
    warm_bytes = {n: int(runs["warm"][n]["capacity_bytes"]) for n in names}
    order = ["direct", "warm", "cold", "restarted", "duckdb"]
    with open(Path(a.out) / "ssb-readpath.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query"] + [f"{k}_seconds" for k in order]
                   + ["cold_bytes_from_minio", "cold_bytes_read", "cold_gets", "cold_heads",
                      "warm_bytes_from_minio", "restarted_bytes_from_minio"])
        for n in names:
            w.writerow([n] + [f"{sec[k][n]:.4f}" for k in order]
                       + [cold_bytes[n], cold_read[n], cold_gets[n], cold_heads[n], warm_bytes[n],
                          rest_bytes[n]])

    tot = {k: sum(sec[k].values()) for k in order}
    print()
    print(f"SSB SF {a.sf}, {a.threads} threads, seconds per query; MinIO on 127.0.0.1")
    print(f"{'query':<6} {'direct':>8} {'warm':>8} {'cold':>8} {'restart':>8} {'duckdb':>8}"
          f" {'cold MiB':>9} {'read MiB':>9} {'GETs':>6} {'HEADs':>6} {'warm/dir':>8} {'cold/warm':>9}"
          f" {'rst/warm':>8}")
    for n in names:
        print(f"{n:<6} " + " ".join(f"{sec[k][n]:8.3f}" for k in order)
              + f" {cold_bytes[n] / 2**20:9.1f} {cold_read[n] / 2**20:9.1f} {cold_gets[n]:6d}"
              f" {cold_heads[n]:6d}"
              f" {sec['warm'][n] / sec['direct'][n]:8.2f} {sec['cold'][n] / sec['warm'][n]:9.2f}"
              f" {sec['restarted'][n] / sec['warm'][n]:8.2f}")
    cb, cg, ch = sum(cold_bytes.values()), sum(cold_gets.values()), sum(cold_heads.values())
    cr = sum(cold_read.values())
    print(f"{'total':<6} " + " ".join(f"{tot[k]:8.3f}" for k in order)
          + f" {cb / 2**20:9.1f} {cr / 2**20:9.1f} {cg:6d} {ch:6d} {tot['warm'] / tot['direct']:8.2f}"
          f" {tot['cold'] / tot['warm']:9.2f} {tot['restarted'] / tot['warm']:8.2f}")
    cold_mibs = cb / 2**20 / tot["cold"]
    print()
    print(f"MinIO raw throughput (8 MiB GETs, 16 at once): {raw_mibs:.0f} MiB/s; "
          f"cold queries fetched {cb / 2**20:.0f} MiB in {tot['cold']:.2f} s: {cold_mibs:.0f} MiB/s "
          f"({cold_mibs / raw_mibs:.0%} of raw)")
    print(f"bytes from MinIO in the warm run: {sum(warm_bytes.values())}; "
          f"in the restarted run: {sum(rest_bytes.values())}")
    if variants:
        print()
        print("cold runs side by side (same invocation):")
        print(f"{'run':<16} {'seconds':>8} {'fetched MiB':>12} {'read MiB':>9} {'fetched/read':>12} {'GETs':>6}")
        rows = [("cold", runs["cold"])] + [(f"cold-{t}", r) for t, (r, _) in variants.items()]
        for label, r in rows:
            s_ = sum(float(r[n]["seconds"]) for n in names)
            f_ = sum(int(r[n]["capacity_bytes"]) for n in names)
            rd = sum(int(r[n]["bytes_read"]) for n in names)
            g_ = sum(int(r[n]["capacity_gets"]) for n in names)
            print(f"{label:<16} {s_:8.3f} {f_ / 2**20:12.1f} {rd / 2**20:9.1f} {f_ / max(rd, 1):12.2f} {g_:6d}")
    targets = [
        ("warm <= 1.1x direct", tot["warm"] / tot["direct"], 1.1),
        ("cold <= 2x warm", tot["cold"] / tot["warm"], 2.0),
        ("cold < DuckDB httpfs cold", tot["cold"] / tot["duckdb"], 1.0),
        ("restarted <= 1.2x warm", tot["restarted"] / tot["warm"], 1.2),
        ("cold MiB/s >= 70% of raw", cold_mibs / raw_mibs, 0.7),
        ("cold fetched <= 1.2x read", cb / max(cr, 1), 1.2),
    ]
    print("targets:")
    for label, value, limit in targets:
        met = value >= limit if label.startswith("cold MiB/s") else value <= limit
        print(f"  {label:<28} {value:6.2f}  {'met' if met else 'NOT met'}")
    json.dump({"sf": a.sf, "threads": a.threads, "seconds": sec, "cold_bytes": cold_bytes,
               "cold_bytes_read": cold_read,
               "cold_gets": cold_gets, "cold_heads": cold_heads, "raw_mib_per_s": raw_mibs,
               "duckdb": duck["duckdb"]},
              open(Path(a.out) / "ssb-readpath.json", "w"), indent=1)
    bar_plot(names, {k: [sec[k][n] for n in names] for k in order},
             f"SSB SF {a.sf}, {a.threads} threads: the read path (MinIO raw {raw_mibs:.0f} MiB/s)",
             Path(a.out) / "ssb-readpath.png")


if __name__ == "__main__":
    main()
