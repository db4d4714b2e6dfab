"""Short-lived writers (issue 26 item 7): N processes, each one `tierdb kv put` (or one
one-row `tierdb sql … INSERT`), on one database; every --sample processes the objects and
bytes in the store (`tierdb store ls`) and the time of a read-only open (`tierdb kv get`, or a
`SELECT count(*)`), which replays what the last writers left. Files, bytes and open time must
stay flat: GC deletes what no manifest needs, a clean close keeps WAL replay short.

Prints a table, writes short-writers-<label>.{csv,json,png} to --out.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def run(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return dt, p.stdout


def census(tierdb, url, db):
    """(objects, bytes, objects by folder) of the database `db` in the store at url."""
    _, out = run([tierdb, "store", "ls", url, db])
    objects, size, folders = 0, 0, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        objects += 1
        size += int(parts[0])
        rel = parts[3][len(db) + 1 :] if parts[3].startswith(db + "/") else parts[3]
        folder = rel.split("/", 1)[0] if "/" in rel else "."
        folders[folder] = folders.get(folder, 0) + 1
    return objects, size, folders


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--url", required=True, help="a directory or s3://bucket/prefix")
    ap.add_argument("--kind", choices=["kv", "sql"], default="kv")
    ap.add_argument("--processes", type=int, default=10000)
    ap.add_argument("--sample", type=int, default=250)
    ap.add_argument("--label", default="local")
    ap.add_argument("--out", default="bench-results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    db = "db"
    target = a.url.rstrip("/") + "/" + db
    t = a.tierdb
    if a.kind == "sql":
        run([t, "sql", target, "--create", "-c", "CREATE TABLE t (id BIGINT NOT NULL, v VARCHAR)"])

    def write(i):
        if a.kind == "kv":
            return run([t, "kv", "put", target, f"k{i:06d}", f"v{i}", "--create"])[0]
        return run([t, "sql", target, "-c", f"INSERT INTO t VALUES ({i}, 'v{i}')"])[0]

    def read_open():
        if a.kind == "kv":
            return run([t, "kv", "get", target, "k000000"])[0]
        return run([t, "sql", target, "-c", "SELECT count(*) FROM t"])[0]

    rows = []
    header = f"{'processes':>9} {'objects':>8} {'bytes':>10} {'write s':>8} {'open s':>7}  by folder"
    print(header, flush=True)
    started = time.perf_counter()
    writes = []
    for i in range(a.processes):
        writes.append(write(i))
        n = i + 1
        if n % a.sample == 0 or n == a.processes:
            objects, size, folders = census(t, a.url, db)
            open_s = min(read_open() for _ in range(3))
            recent = writes[-a.sample :]
            row = {
                "processes": n,
                "objects": objects,
                "bytes": size,
                "write_s_median": sorted(recent)[len(recent) // 2],
                "open_s": open_s,
                "folders": folders,
                "elapsed_s": time.perf_counter() - started,
            }
            rows.append(row)
            print(
                f"{n:>9} {objects:>8} {size:>10} {row['write_s_median']:>8.3f} {open_s:>7.3f}  "
                + " ".join(f"{k}={v}" for k, v in sorted(folders.items())),
                flush=True,
            )
    base = os.path.join(a.out, f"short-writers-{a.kind}-{a.label}")
    with open(base + ".json", "w") as f:
        json.dump({"kind": a.kind, "url": a.url, "rows": rows}, f, indent=1)
    with open(base + ".csv", "w") as f:
        f.write("processes,objects,bytes,write_s_median,open_s\n")
        for r in rows:
            f.write(f"{r['processes']},{r['objects']},{r['bytes']},{r['write_s_median']:.4f},{r['open_s']:.4f}\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
        xs = [r["processes"] for r in rows]
        ax[0].plot(xs, [r["objects"] for r in rows])
        ax[0].set_title("objects in the store")
        ax[1].plot(xs, [r["bytes"] / 1024 for r in rows])
        ax[1].set_title("KiB in the store")
        ax[2].plot(xs, [r["open_s"] for r in rows], label="read-only open + read")
        ax[2].plot(xs, [r["write_s_median"] for r in rows], label="writer process (median)")
        ax[2].set_title("seconds")
        ax[2].legend()
        for x in ax:
            x.set_xlabel("short-lived writer processes")
            x.set_ylim(bottom=0)
        fig.suptitle(f"tierdb {a.kind}: {a.processes} short-lived writers on {a.label}")
        fig.tight_layout()
        fig.savefig(base + ".png", dpi=110)
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
    first, last = rows[0], rows[-1]
    print(
        f"\nafter {first['processes']}: {first['objects']} objects, {first['bytes']} bytes, open {first['open_s']:.3f} s; "
        f"after {last['processes']}: {last['objects']} objects, {last['bytes']} bytes, open {last['open_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
