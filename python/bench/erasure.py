"""tierdb on an erasure-coded MinIO losing a drive: nothing is lost, every read and write
goes on, and what the redundancy costs in bytes.

Steps (each prints what it measured):
  1. start MinIO on this machine with --drives directories as one erasure set
     (MINIO_STORAGE_CLASS_STANDARD=EC:--parity: data and parity shards of every object are
     spread over the drives, so any --parity of them can be lost);
  2. load SSB at --sf into s3://BUCKET/ssb (`tierdb ssb load`) and record the 13 answers;
  3. run a ZODB workload (a TierStorage on s3://BUCKET/zodb in write-through mode: a commit
     is acknowledged once MinIO has it) and a SQL workload (`tierdb sql --read-only`
     running Q1.1 to Q4.3 in turn, each answer checked) at the same time;
  4. once both have made progress, delete one drive's directory under them, and
     let both go on for as much work again;
  5. check: every acknowledged ZODB commit is there with its bytes (a fresh storage, empty
     cache), the 13 SSB answers of a fresh process equal step 2's, and a new SQL table can
     be written and read back after the loss;
  6. print the bytes on the drives against the logical bytes of the objects, the commit
     and query latencies before and after the loss (the stall, if any), and write
     erasure.json.

Exits 1 if anything was lost, wrong or failed. Needs the MinIO binary (MINIO_BIN, default
~/.cache/tierdb/bin/minio; scripts/minio.sh builds it).
"""

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ssb_compare import queries, run, tierdb_bench, tierdb_load  # noqa: E402

BUCKET = "tierdb-ec"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_minio(binary, root, drives, parity):
    port, console = free_port(), free_port()
    env = dict(os.environ, MINIO_ROOT_USER="tierdbtest", MINIO_ROOT_PASSWORD="tierdbtest-secret",
               MINIO_STORAGE_CLASS_STANDARD=f"EC:{parity}",
               # Drives on the root filesystem are refused outside CI/CD mode.
               MINIO_CI_CD="1")
    log = open(root / "minio.log", "w")
    p = subprocess.Popen([binary, "server", str(root / f"d{{1...{drives}}}"),
                          "--address", f"127.0.0.1:{port}", "--console-address", f"127.0.0.1:{console}"],
                         stdout=log, stderr=subprocess.STDOUT, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    # Live is not enough: the erasure set takes writes once it has its write quorum
    # (/minio/health/cluster answers 200), which on a loaded machine comes later; the
    # bucket is made by then, retried until a deadline rather than after a fixed sleep.
    deadline = time.time() + 120
    created = False
    while time.time() < deadline:
        if p.poll() is not None:
            raise SystemExit("MinIO exited:\n" + (root / "minio.log").read_text())
        ready = subprocess.run(["curl", "-sf", f"{endpoint}/minio/health/cluster"],
                               capture_output=True).returncode == 0
        if ready and subprocess.run(["curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3",
                                     "--user", "tierdbtest:tierdbtest-secret", f"{endpoint}/{BUCKET}"],
                                    capture_output=True).returncode == 0:
            created = True
            break
        time.sleep(0.2)
    if not created:
        p.kill()
        raise SystemExit("MinIO's erasure set took no write within 120 s:\n" + (root / "minio.log").read_text()[-3000:])
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="tierdbtest",
                      AWS_SECRET_ACCESS_KEY="tierdbtest-secret", AWS_REGION="us-east-1")
    return p


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total


def logical_bytes(tierdb, url):
    out = run([tierdb, "store", "ls", url])
    return sum(int(line.split()[0]) for line in out.splitlines() if line.strip())


def payload(i):
    """The bytes of commit i: 4 KiB, different per commit, checkable."""
    seed = hashlib.sha256(str(i).encode()).digest()
    return seed * 128


class ZodbLoad(threading.Thread):
    """Commits one 4 KiB record per transaction until stopped; records acknowledged commits
    and their latencies."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.stop, self.acked, self.latencies, self.error = url, threading.Event(), [], [], None

    def run(self):
        import transaction
        import ZODB
        from tierdb.zodb import TierStorage
        try:
            db = ZODB.DB(TierStorage(self.url, write_mode="write-through"))
            conn = db.open()
            root = conn.root()
            i = 0
            while not self.stop.is_set():
                started = time.perf_counter()
                root[f"k{i}"] = payload(i)
                transaction.commit()
                self.latencies.append((time.time(), time.perf_counter() - started))
                self.acked.append(i)
                i += 1
            conn.close()
            db.close()
        except Exception as e:  # reported by main
            self.error = repr(e)


class SqlLoad(threading.Thread):
    """Runs the 13 queries in turn in new `tierdb sql --read-only` processes until stopped;
    every answer is compared with the answer before the loss."""

    def __init__(self, tierdb, url, qs, expected):
        super().__init__(daemon=True)
        self.tierdb, self.url, self.qs, self.expected = tierdb, url, qs, expected
        self.stop, self.done, self.latencies, self.errors = threading.Event(), 0, [], []

    def run(self):
        i = 0
        while not self.stop.is_set():
            name, sql = self.qs[i % len(self.qs)]
            started = time.perf_counter()
            p = subprocess.run([self.tierdb, "sql", self.url, "--read-only", "--format", "csv", "-c", sql],
                               capture_output=True, text=True)
            self.latencies.append((time.time(), time.perf_counter() - started))
            if p.returncode != 0:
                self.errors.append(f"{name}: exit {p.returncode}: {p.stderr.strip()}")
            elif sorted(p.stdout.splitlines()[1:]) != self.expected[name]:
                self.errors.append(f"{name}: a different answer")
            self.done += 1
            i += 1


def wait_for(what, predicate, timeout):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--minio", default=os.environ.get("MINIO_BIN", os.path.expanduser("~/.cache/tierdb/bin/minio")))
    ap.add_argument("--drives", type=int, default=6)
    ap.add_argument("--parity", type=int, default=2)
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--data", help="directory of generated .tbl files (default: a temporary one)")
    ap.add_argument("--commits", type=int, default=100, help="ZODB commits before the loss, and again after")
    ap.add_argument("--out", default="bench-results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tierdb-erasure-"))
    minio = start_minio(a.minio, work, a.drives, a.parity)
    problems, report = [], {"drives": a.drives, "parity": a.parity, "sf": a.sf}
    try:
        data = Path(a.data) if a.data else work / "ssb"
        if not list(data.glob("lineorder.tbl*")):
            run([a.tierdb, "ssb", "generate", "--sf", a.sf, data])
        ssb_url, zodb_url = f"s3://{BUCKET}/ssb", f"s3://{BUCKET}/zodb"
        tierdb_load(a.tierdb, ssb_url, data, 2)
        qs = queries(a.tierdb)
        _, before = tierdb_bench(a.tierdb, ssb_url, 2, 1, a.out, "erasure-before")
        expected = {}
        for name, sql in qs:
            p = run([a.tierdb, "sql", ssb_url, "--read-only", "--format", "csv", "-c", sql])
            expected[name] = sorted(p.splitlines()[1:])

        zodb = ZodbLoad(zodb_url)
        sql_load = SqlLoad(a.tierdb, ssb_url, qs, expected)
        zodb.start()
        sql_load.start()
        wait_for(f"{a.commits} ZODB commits and 3 queries",
                 lambda: zodb.error or (len(zodb.acked) >= a.commits and sql_load.done >= 3), 600)
        drives = [work / f"d{i}" for i in range(1, a.drives + 1)]
        on_drives = sum(du(d) for d in drives)
        meta = sum(du(d / ".minio.sys") for d in drives)
        # Listed right after the drives were measured (the workloads go on meanwhile).
        logical = logical_bytes(a.tierdb, ssb_url) + logical_bytes(a.tierdb, zodb_url)
        lost_drive = drives[a.drives // 2]
        lost_at = time.time()
        # Renamed first (atomic: the drive is gone at once for MinIO, which goes on writing
        # to the drives it has), then deleted.
        gone = lost_drive.with_name(lost_drive.name + ".deleted")
        os.rename(lost_drive, gone)
        shutil.rmtree(gone, ignore_errors=True)
        print(f"== deleted {lost_drive} at {len(zodb.acked)} commits, {sql_load.done} queries", flush=True)
        mark_commits, mark_queries = len(zodb.acked), sql_load.done
        wait_for(f"{a.commits} more ZODB commits and 3 more queries",
                 lambda: zodb.error or (len(zodb.acked) >= mark_commits + a.commits
                                        and sql_load.done >= mark_queries + 3), 600)
        zodb.stop.set()
        sql_load.stop.set()
        zodb.join(120)
        sql_load.join(600)
        if zodb.error:
            problems.append(f"ZODB workload failed: {zodb.error}")
        problems += [f"SQL during the loss: {e}" for e in sql_load.errors]

        # Everything acknowledged, read back by a fresh storage (an empty cache).
        import ZODB
        from tierdb.zodb import TierStorage
        db = ZODB.DB(TierStorage(zodb_url, create=False))
        conn = db.open()
        root = conn.root()
        missing = [i for i in zodb.acked if root.get(f"k{i}") != payload(i)]
        conn.close()
        db.close()
        if missing:
            problems.append(f"{len(missing)} acknowledged ZODB commits lost or changed, e.g. {missing[:5]}")
        _, after = tierdb_bench(a.tierdb, ssb_url, 2, 1, a.out, "erasure-after")
        differ = [q for q in before if before[q] != after[q]]
        if differ:
            problems.append(f"SSB answers after the loss differ: {differ}")
        out = run([a.tierdb, "sql", ssb_url, "--format", "csv", "-c",
                   "CREATE TABLE after_loss (k INT NOT NULL, v VARCHAR) ORDER BY (k);"
                   "INSERT INTO after_loss SELECT d_datekey, d_date FROM date;"
                   "SELECT count(*) FROM after_loss"])
        written = int(out.strip().splitlines()[-1])
        days = int(run([a.tierdb, "sql", ssb_url, "--read-only", "--format", "csv", "-c",
                        "SELECT count(*) FROM date"]).strip().splitlines()[-1])
        if written != days:
            problems.append(f"a table written after the loss has {written} rows, not {days}")

        commit_before = [t for w, t in zodb.latencies if w < lost_at]
        commit_after = [t for w, t in zodb.latencies if w >= lost_at]
        query_before = [t for w, t in sql_load.latencies if w < lost_at]
        query_after = [t for w, t in sql_load.latencies if w >= lost_at]
        report.update({
            "logical_bytes": logical, "bytes_on_drives": on_drives, "minio_sys_bytes": meta,
            "overhead": on_drives / logical, "data_overhead": (on_drives - meta) / logical,
            "expected_overhead": a.drives / (a.drives - a.parity),
            "commits": len(zodb.acked), "commits_after_loss": len(commit_after),
            "queries": sql_load.done, "queries_after_loss": len(query_after),
            "commit_ms_median_before": statistics.median(commit_before) * 1e3,
            "commit_ms_max_before": max(commit_before) * 1e3,
            "commit_ms_median_after": statistics.median(commit_after) * 1e3,
            "commit_ms_max_after": max(commit_after) * 1e3,
            "query_s_max_before": max(query_before), "query_s_max_after": max(query_after),
            "problems": problems,
        })
    finally:
        minio.terminate()
        try:
            minio.wait(30)
        except subprocess.TimeoutExpired:
            minio.kill()
        shutil.rmtree(work, ignore_errors=True)
    r = report
    print(f"\nMinIO erasure set: {a.drives} drives, EC:{a.parity} (any {a.parity} may be lost), one deleted under load")
    print(f"{'logical bytes (objects as tierdb wrote them)':<48} {r['logical_bytes'] / 1e6:10.1f} MB")
    print(f"{'bytes on the drives':<48} {r['bytes_on_drives'] / 1e6:10.1f} MB  {r['overhead']:.2f}x")
    print(f"{'  of which MinIO metadata (.minio.sys)':<48} {r['minio_sys_bytes'] / 1e6:10.1f} MB")
    print(f"{'  object data and parity':<48} {(r['bytes_on_drives'] - r['minio_sys_bytes']) / 1e6:10.1f} MB  "
          f"{r['data_overhead']:.2f}x (EC {a.drives - a.parity}+{a.parity}: {r['expected_overhead']:.2f}x; 3 replicas: 3.00x)")
    print(f"ZODB commits: {r['commits']} acknowledged ({r['commits_after_loss']} after the loss), "
          f"median {r['commit_ms_median_before']:.1f} ms / max {r['commit_ms_max_before']:.1f} ms before, "
          f"median {r['commit_ms_median_after']:.1f} ms / max {r['commit_ms_max_after']:.1f} ms after")
    print(f"SQL queries: {r['queries']} ({r['queries_after_loss']} after the loss), slowest "
          f"{r['query_s_max_before']:.2f} s before, {r['query_s_max_after']:.2f} s after")
    with open(Path(a.out) / "erasure.json", "w") as f:
        json.dump(report, f, indent=1)
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("nothing lost: every acknowledged commit read back, every answer equal, writes after the loss work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
