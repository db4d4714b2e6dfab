"""Writes a FileStorage Data.fs of at least --size bytes for import benchmarks.

What it holds (so the dedup and compression ratios an import reports can be judged):
documents (PersistentMapping) with a title, numbers and a body of words drawn from a
2,000-word vocabulary (text compresses about 3x with zstd, as catalogued content does),
kept in OOBTree folders of 1,000; each transaction adds 200 documents and edits 50 earlier
ones (one edit in five puts back the state before the document's last edit); one new
document in ten is a stub made from one of 20 templates, all stubs of a template being the
same state (what dedup stores once); 5% of documents carry 2 KiB of random bytes
(incompressible, like stored images or archives).

    python make_datafs.py OUT.fs --size 1GiB
"""

import argparse
import os
import random
import sys
import time

import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage


def parse_size(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.lower().rstrip("ib").rstrip("b")
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    target = parse_size(args.size)
    if os.path.exists(args.out):
        sys.exit("error: %s exists; remove it first" % args.out)
    rng = random.Random(args.seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
             for _ in range(2000)]
    templates = [" ".join(rng.choice(vocab) for _ in range(300)) for _ in range(20)]
    db = ZODB.DB(FileStorage(args.out), cache_size=5000)
    conn = db.open()
    root = conn.root()
    folders = []
    docs = []
    history = {}
    n = 0
    started = time.time()
    try:
        from tierdb import _native
        bar = _native.Progress(target, "Data.fs bytes")
    except ImportError:
        bar = None
    last = 0
    while True:
        size = os.path.getsize(args.out)
        if bar:
            bar.inc(size - last)
            last = size
        if size >= target:
            break
        for _ in range(200):
            if n % 1000 == 0:
                f = OOBTree()
                root["folder%05d" % len(folders)] = f
                folders.append(f)
            if rng.random() < 0.1:
                # A stub made from one of 20 templates: the same state as every other stub
                # of that template (dedup stores it once).
                d = PersistentMapping({"title": "untitled", "body": templates[n % 20],
                                       "rev": 0})
                folders[-1]["d%08d" % n] = d
                n += 1
                continue
            body = " ".join(rng.choice(vocab) for _ in range(rng.randint(80, 400)))
            d = PersistentMapping({"id": n, "title": "document %d" % n, "body": body,
                                   "rev": 0})
            if rng.random() < 0.05:
                d["attachment"] = rng.randbytes(2048)
            folders[-1]["d%08d" % n] = d
            docs.append(d)
            n += 1
        for _ in range(50):
            d = rng.choice(docs)
            if d["rev"] > 0 and rng.random() < 0.2:
                d.update(history[d["id"]])  # a revert: the previous state again
            else:
                history[d["id"]] = dict(d)
                d["rev"] += 1
                d["body"] = d["body"] + " " + rng.choice(vocab)
        transaction.get().note("batch ending at document %d" % n)
        transaction.commit()
        if len(docs) > 20000:
            conn.cacheMinimize()
            docs = docs[-20000:]
    if bar:
        bar.finish()
    db.close()
    size = os.path.getsize(args.out)
    print("wrote %s: %.1f MB, %d documents, in %.0f s" % (
        args.out, size / 1e6, n, time.time() - started))


if __name__ == "__main__":
    main()
