"""zodbshootout's operations on TierStorage beside FileStorage, RelStorage (SQLite) and ZEO,
in one invocation on this machine: add N objects in M transactions, update them, then read them
cold (storage reopened: ZODB and storage caches empty), warm (new connection: ZODB cache
empty, storage caches warm), hot (same connection: objects in the ZODB cache) and prefetch
(cold again, but every object asked for first in one `Connection.prefetch`; a storage
without `prefetch` loads them one by one as in cold).

Prints a table of seconds and objects/s per operation and the ratio of each storage's time
to FileStorage's; writes CSV and a PNG. Run by scripts/bench-zodb.sh. With --runs R every
storage is measured R times, each run on fresh data, the storages taking turns within a
run; each cell is the best (least) time of the R: one run on a shared machine is noisy.

    python zodb_bench.py --objects 20000 --txns 200 --runs 3 --out DIR [--s3 s3://bucket/prefix]
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

OPS = ["add", "update", "cold", "warm", "hot", "prefetch"]


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


def run(bench, n, m, key="objects"):
    times = {}
    storage = bench.open_storage()
    db = ZODB.DB(storage, cache_size=n * 2)
    conn = db.open()
    # The objects live in a BTree (as zodbshootout's do), so a commit writes the new
    # objects and a few buckets, not one ever-growing mapping. Concurrent clients each
    # have their own tree, made before they start (see concurrent()).
    if key not in conn.root():
        conn.root()[key] = OOBTree()
        transaction.commit()
    root = conn.root()[key]
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
    total = sum(len(conn.root()[key][k]) for k in keys)
    times["cold"] = time.perf_counter() - t0
    assert total == len(keys) * 4
    conn.close()
    # warm: same storage (its caches warm), the connection's object cache emptied.
    conn = db.open()
    conn.cacheMinimize()
    t0 = time.perf_counter()
    total = sum(len(conn.root()[key][k]) for k in keys)
    times["warm"] = time.perf_counter() - t0
    # hot: the same connection again, every object in its cache.
    t0 = time.perf_counter()
    total = sum(len(conn.root()[key][k]) for k in keys)
    times["hot"] = time.perf_counter() - t0
    conn.close()
    db.close()
    # prefetch: cold again (a new storage and DB), the objects named in one prefetch call
    # before they are read (ZODB's Connection.prefetch: the storage's prefetch(oids, tid)).
    storage = bench.open_storage()
    db = ZODB.DB(storage, cache_size=n * 2)
    conn = db.open()
    t0 = time.perf_counter()
    tree = conn.root()[key]
    objs = [tree[k] for k in keys]
    conn.prefetch(objs)
    total = sum(len(o) for o in objs)
    times["prefetch"] = time.perf_counter() - t0
    assert total == len(keys) * 4
    conn.close()
    db.close()
    bench.cleanup()
    return times


def worker(args):
    """One of several concurrent client processes: runs the operations on its own tree of
    the shared database and prints its times as JSON."""
    import json
    if args.worker == "zeo":
        from ZEO.ClientStorage import ClientStorage
        host, port = args.addr.rsplit(":", 1)
        bench = Bench("zeo", lambda: ClientStorage((host, int(port)), wait_timeout=60))
    else:
        bench = Bench("relstorage", lambda: relstorage_sqlite(args.addr))
    times = run(bench, args.objects, args.txns, key="objects-%s" % args.name)
    print(json.dumps(times))


def relstorage_sqlite(path):
    from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    options = Options(keep_history=True)
    adapter = Sqlite3Adapter(path, {}, options=options)
    return RelStorage(adapter, options=options)


def concurrent(kind, addr, clients, n, m):
    """`clients` processes at once, each with n objects in m transactions. Per operation:
    the slowest client's seconds (the wall time of the operation across them)."""
    import json
    import subprocess
    # The root and each client's tree first, so the clients never conflict on them.
    if kind == "zeo":
        from ZEO.ClientStorage import ClientStorage
        host, port = addr.rsplit(":", 1)
        storage = ClientStorage((host, int(port)), wait_timeout=60)
    else:
        storage = relstorage_sqlite(addr)
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        for c in range(clients):
            conn.root()["objects-%d" % c] = OOBTree()
    db.close()
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--worker", kind, "--addr", addr, "--name", str(c),
         "--objects", str(n), "--txns", str(m)], stdout=subprocess.PIPE, text=True)
        for c in range(clients)]
    got = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit("a %s client failed" % kind)
        got.append(json.loads(out.strip().splitlines()[-1]))
    return {op: max(g[op] for g in got) for op in OPS}


def make_benches(args, work):
    """The storages to measure, on fresh data under `work`: (benches, multi-client rows,
    ZEO servers to stop)."""
    from tierdb.zodb import TierStorage
    from ZODB.FileStorage import FileStorage

    benches = [Bench("FileStorage", lambda: FileStorage(os.path.join(work, "fs", "Data.fs")))]
    os.makedirs(os.path.join(work, "fs"))
    benches.append(Bench(
        "tierdb local dir",
        lambda: TierStorage(os.path.join(work, "tier"), create=True)))
    if args.s3:
        cache = os.path.join(work, "tier-cache")
        prefix = args.s3.rstrip("/") + "/zodb-bench-%d-%s" % (os.getpid(), os.path.basename(work))
        benches.append(Bench(
            "tierdb MinIO+dev w-back",
            lambda: TierStorage(prefix, create=True, cache_dir=cache, cache_bytes=1 << 30,
                                write_mode="write-back")))
    have_rs = True
    try:
        import relstorage  # noqa: F401
        benches.append(Bench("RelStorage SQLite",
                             lambda: relstorage_sqlite(os.path.join(work, "rs"))))
    except ImportError:
        have_rs = False
        print("RelStorage not installed: skipped (scripts/bench-zodb.sh installs it)",
              file=sys.stderr)
    import ZEO
    servers = []
    addr, stop = ZEO.server(path=os.path.join(work, "zeo.fs"))
    servers.append(stop)
    tier_conf = "%%import tierdb\n<tierdb 1>\n  url %s\n</tierdb>\n" % os.path.join(
        work, "zeo-tier")
    tier_addr, stop = ZEO.server(storage_conf=tier_conf)
    servers.append(stop)

    def zeo_client(a):
        from ZEO.ClientStorage import ClientStorage
        return lambda: ClientStorage(a, wait_timeout=30)
    benches.append(Bench("ZEO (FileStorage)", zeo_client(addr)))
    benches.append(Bench("ZEO (tierdb)", zeo_client(tier_addr)))
    # Several client processes at once on one database: ZEO over either storage and
    # RelStorage (FileStorage and TierStorage take one writer process each).
    multi = []
    if args.clients > 1:
        def zeo_multi(a):
            return lambda: concurrent("zeo", "%s:%d" % a, args.clients, args.objects,
                                      args.txns)
        a, stop = ZEO.server(path=os.path.join(work, "zeo-multi.fs"))
        servers.append(stop)
        multi.append(("ZEO (FileStorage) x%d" % args.clients, zeo_multi(a)))
        multi_tier = "%%import tierdb\n<tierdb 1>\n  url %s\n</tierdb>\n" % os.path.join(
            work, "zeo-multi-tier")
        a, stop = ZEO.server(storage_conf=multi_tier)
        servers.append(stop)
        multi.append(("ZEO (tierdb) x%d" % args.clients, zeo_multi(a)))
        if have_rs:
            multi.append(("RelStorage SQLite x%d" % args.clients, lambda: concurrent(
                "relstorage", os.path.join(work, "rs-multi"), args.clients, args.objects,
                args.txns)))
    if args.only:
        benches = [b for b in benches if b.name in args.only.split(",")]
        multi = [(name, f) for name, f in multi if name in args.only.split(",")]
    return benches, multi, servers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, default=4,
                    help="concurrent client processes for the multi-process rows")
    ap.add_argument("--objects", type=int, default=20000)
    ap.add_argument("--txns", type=int, default=200)
    ap.add_argument("--out", default=".")
    ap.add_argument("--s3", default=os.environ.get("TIERDB_BENCH_S3_URL"))
    ap.add_argument("--only", default="")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs on fresh data; each cell is the best (least time) of them")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    from tierdb import _native
    bar = None
    runs = []
    for r in range(args.runs):
        work = tempfile.mkdtemp(prefix="tierdb-zodb-bench-")
        benches, multi, servers = make_benches(args, work)
        if bar is None:
            bar = _native.Progress(args.runs * (len(benches) + len(multi)), "zodb bench")
        results = {}
        try:
            for b in benches:
                bar.message("run %d/%d: %s" % (r + 1, args.runs, b.name))
                results[b.name] = run(b, args.objects, args.txns)
                bar.inc(1)
            for name, f in multi:
                bar.message("run %d/%d: %s" % (r + 1, args.runs, name))
                results[name] = f()
                bar.inc(1)
        finally:
            for stop in servers:
                stop()
            shutil.rmtree(work, ignore_errors=True)
        runs.append(results)
    bar.finish()
    # Best of the runs per storage and operation: the least disturbed measurement.
    results = {name: {op: min(r[name][op] for r in runs) for op in OPS} for name in runs[0]}

    ref = results.get("FileStorage")
    n = args.objects
    print("\n%d objects in %d transactions (per client), best of %d runs; seconds (objects/s), "
          "and the time relative to FileStorage's (lower is faster). Rows xN: N client processes at once,\n"
          "each adding, updating and reading its own %d objects; seconds of the slowest, "
          "objects/s of all together." % (n, args.txns, args.runs, n))
    header = "%-26s" % "storage" + "".join("%22s" % op for op in OPS)
    print(header)
    rows = []
    for name, t in results.items():
        cells = []
        clients = int(name.rsplit("x", 1)[1]) if " x" in name else 1
        for op in OPS:
            rel = t[op] / ref[op] if ref and ref[op] > 0 else float("nan")
            rate = n * clients / t[op]
            cells.append("%7.3f %7.0f/s %5.2fx" % (t[op], rate, rel))
            rows.append({"storage": name, "op": op, "seconds": "%.4f" % t[op],
                         "objects_per_s": "%.0f" % rate, "vs_filestorage": "%.3f" % rel})
        print("%-26s" % name + "".join("%22s" % c for c in cells))
    # The targets of issue 14 compare ZEO over tierdb with ZEO over FileStorage.
    for a, b in (("ZEO (tierdb)", "ZEO (FileStorage)"),
                 ("ZEO (tierdb) x%d" % args.clients, "ZEO (FileStorage) x%d" % args.clients)):
        if a in results and b in results:
            print("%-26s" % ("%s / %s" % (a.replace("ZEO ", ""), b.replace("ZEO ", "")))
                  + "".join("%22s" % ("%.2fx" % (results[a][op] / results[b][op]))
                            for op in OPS))
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
            clients = int(name.rsplit("x", 1)[1]) if " x" in name else 1
            ax.bar([i + k * width for i in range(len(OPS))],
                   [n * clients / t[op] for op in OPS],
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
