"""zodbshootout's operations on TierStorage beside FileStorage, RelStorage (SQLite) and ZEO,
in one run on this machine: add N objects in M transactions, update them, then read them
cold (storage reopened: ZODB and storage caches empty), warm (new connection: ZODB cache
empty, storage caches warm) and hot (same connection: objects in the ZODB cache).

Prints a table of seconds and objects/s per operation and the ratio of each storage's time
to FileStorage's; writes CSV and a PNG. Run by scripts/bench-zodb.sh.

    python zodb_bench.py --objects 20000 --txns 200 --out DIR [--s3 s3://bucket/prefix]
"""

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time

import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

OPS = ["add", "update", "cold", "warm", "hot"]


class Bench:
    """One storage kind: `open()` returns a new storage on the same data."""

    def __init__(self, name, open_storage, cleanup=lambda: None):
        self.name = name
        self.open_storage = open_storage
        self.cleanup = cleanup


def payload(i, rev):
    # About 300 bytes of state per object: a mix of text and numbers.
    return {"n": i, "rev": rev, "title": "object %d revision %d" % (i, rev),
            "body": ("lorem ipsum dolor sit amet %d " % (i % 97)) * 8}


def run(bench, n, m):
    times = {}
    storage = bench.open_storage()
    db = ZODB.DB(storage, cache_size=n * 2)
    conn = db.open()
    # The objects live in a BTree (as zodbshootout's do), so a commit writes the new
    # objects and a few buckets, not one ever-growing mapping.
    conn.root()["objects"] = root = OOBTree()
    transaction.commit()
    per_txn = n // m
    t0 = time.perf_counter()
    oids = []
    for t in range(m):
        for j in range(per_txn):
            i = t * per_txn + j
            root["o%d" % i] = PersistentMapping(payload(i, 0))
        transaction.commit()
    times["add"] = time.perf_counter() - t0
    keys = list(root.keys())
    t0 = time.perf_counter()
    for t in range(m):
        for k in keys[t * per_txn:(t + 1) * per_txn]:
            root[k]["rev"] = 1
        transaction.commit()
    times["update"] = time.perf_counter() - t0
    conn.close()
    db.close()

    # cold: a new storage object (its caches empty) and a new DB.
    storage = bench.open_storage()
    db = ZODB.DB(storage, cache_size=n * 2)
    conn = db.open()
    t0 = time.perf_counter()
    total = sum(len(conn.root()["objects"][k]) for k in keys)
    times["cold"] = time.perf_counter() - t0
    assert total == len(keys) * 4
    conn.close()
    # warm: same storage (its caches warm), the connection's object cache emptied.
    conn = db.open()
    conn.cacheMinimize()
    t0 = time.perf_counter()
    total = sum(len(conn.root()["objects"][k]) for k in keys)
    times["warm"] = time.perf_counter() - t0
    # hot: the same connection again, every object in its cache.
    t0 = time.perf_counter()
    total = sum(len(conn.root()["objects"][k]) for k in keys)
    times["hot"] = time.perf_counter() - t0
    conn.close()
    db.close()
    bench.cleanup()
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=20000)
    ap.add_argument("--txns", type=int, default=200)
    ap.add_argument("--out", default=".")
    ap.add_argument("--s3", default=os.environ.get("TIERDB_BENCH_S3_URL"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tierdb-zodb-bench-")
    from tierdb.zodb import TierStorage
    from ZODB.FileStorage import FileStorage

    benches = [Bench("FileStorage", lambda: FileStorage(os.path.join(work, "fs", "Data.fs")))]
    os.makedirs(os.path.join(work, "fs"))
    benches.append(Bench(
        "tierdb local dir",
        lambda: TierStorage(os.path.join(work, "tier"), create=True)))
    if args.s3:
        cache = os.path.join(work, "tier-cache")
        benches.append(Bench(
            "tierdb MinIO, no device",
            lambda: TierStorage(args.s3.rstrip("/") + "/zodb-bench-nodev-%d" % os.getpid(),
                                create=True)))
        benches.append(Bench(
            "tierdb MinIO + device",
            lambda: TierStorage(args.s3.rstrip("/") + "/zodb-bench-%d" % os.getpid(),
                                create=True, cache_dir=cache, cache_bytes=1 << 30)))
    try:
        from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage

        def relstorage_sqlite():
            options = Options(keep_history=True)
            adapter = Sqlite3Adapter(os.path.join(work, "rs"), {}, options=options)
            return RelStorage(adapter, options=options)
        benches.append(Bench("RelStorage SQLite", relstorage_sqlite))
    except ImportError:
        print("RelStorage not installed: skipped (scripts/bench-zodb.sh installs it)",
              file=sys.stderr)
    import ZEO
    addr, stop = ZEO.server(path=os.path.join(work, "zeo.fs"))

    def zeo_client():
        from ZEO.ClientStorage import ClientStorage
        return ClientStorage(addr, wait_timeout=30)
    benches.append(Bench("ZEO (FileStorage)", zeo_client))
    if args.only:
        benches = [b for b in benches if b.name in args.only.split(",")]

    from tierdb import _native
    bar = _native.Progress(len(benches), "zodb bench")
    results = {}
    for b in benches:
        bar.message(b.name)
        results[b.name] = run(b, args.objects, args.txns)
        bar.inc(1)
    bar.finish()
    stop()
    shutil.rmtree(work, ignore_errors=True)

    ref = results.get("FileStorage")
    n = args.objects
    print("\n%d objects in %d transactions; seconds (objects/s), and the time relative to "
          "FileStorage's (lower is faster)" % (n, args.txns))
    header = "%-24s" % "storage" + "".join("%22s" % op for op in OPS)
    print(header)
    rows = []
    for name, t in results.items():
        cells = []
        for op in OPS:
            rel = t[op] / ref[op] if ref and ref[op] > 0 else float("nan")
            cells.append("%7.3f %7.0f/s %5.2fx" % (t[op], n / t[op], rel))
            rows.append({"storage": name, "op": op, "seconds": "%.4f" % t[op],
                         "objects_per_s": "%.0f" % (n / t[op]), "vs_filestorage": "%.3f" % rel})
        print("%-24s" % name + "".join("%22s" % c for c in cells))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "zodb-bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / len(results)
        for k, (name, t) in enumerate(results.items()):
            ax.bar([i + k * width for i in range(len(OPS))], [n / t[op] for op in OPS],
                   width, label=name)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(OPS))], OPS)
        ax.set_yscale("log")
        ax.set_ylabel("objects/s (log)")
        ax.set_title("zodbshootout operations, %d objects in %d transactions" % (n, args.txns))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "zodb-bench.png"), dpi=110)
    except ImportError:
        print("matplotlib not installed: no PNG", file=sys.stderr)


if __name__ == "__main__":
    main()
