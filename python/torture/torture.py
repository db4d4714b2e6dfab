#!/usr/bin/env python3
"""tierdb torture: runs an operator's bad days in a loop for a given time and counts, per
scenario, cycles, acknowledged writes, and the outcomes that must never happen: acknowledged
writes lost, wrong answers (exit 0 with data that differs from what was acknowledged),
panics and hangs. Detected damage (a non-zero exit that names it) is the right answer to a
flipped byte and is counted apart.

Scenarios (local directory unless --s3 names a MinIO bucket URL):
  kill9-write-through, kill9-write-back
      `tierdb debug kv-commit-stream` SIGKILLed after a random number of acknowledged batches;
      reopened with the same cache directory, every acknowledged batch must be there in full.
  start-race
      two `kv put --create` in write-back with their own cache directories, started together;
      every put that exited 0 must be in the database.
  flip-segment
      one byte flipped in a table's Parquet segment; a query must give the true answer or fail
      naming the damage.
  flip-manifest, flip-sst
      one byte flipped in the newest SlateDB manifest or in an SST (WAL or compacted); `kv scan`
      must return every acknowledged batch or fail naming the damage.
  pause-write-through, pause-write-back (need --s3 and --minio-pid)
      a commit stream while MinIO is paused (SIGSTOP) for 1 to 8 s, then resumed, SIGKILLed
      later: every acknowledged batch must be there.
  restart-write-through, restart-write-back (need --minio-bin)
      a commit stream on a MinIO of the torture's own, which is killed (SIGKILL) for 1 to 10 s
      and restarted on the same address and data. The writer keeps going or exits non-zero
      (never hangs); it is SIGKILLed later and every acknowledged batch must be there.
  full-device (needs root, to mount a 4 MiB tmpfs as the cache device, and --s3/--minio-pid)
      a write-back stream with a 16 MiB log budget on a 4 MiB device while MinIO is paused, so
      the log's device fills (ENOSPC); commits fall back to direct puts or fail with a clear
      error; SIGKILLed later, every acknowledged batch must be there.
  kill9-rows (needs pgbench and psql from postgresql-15's client)
      `tierdb serve` on row tables (pgbench -i, scale 1) running pgbench tpcb-like with 4
      clients, SIGKILLed after 1 to 6 s, then restarted: the balances of accounts, tellers,
      branches and history must agree (each transaction moved one delta through all four),
      history must hold every transaction pgbench counted as done, and `tierdb verify` must
      find every row with its index entries and every entry with its row.
  flip-wblog (needs --s3 and --minio-pid: the MinIO process to pause)
      a write-back stream whose uploads are held back by pausing MinIO (SIGSTOP), SIGKILLed;
      one byte flipped in a record that has valid records after it; the next open must refuse
      (never exit 0 with acknowledged batches missing).

Prints a table and writes JSON (--json). Exit status 1 if anything was lost, wrong, panicked
or hung.
"""

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROWS = 20
HANG_S = 60
PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
PSQL = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"


class Outcome:
    FIELDS = ["cycles", "acked", "lost", "wrong", "detected", "panics", "hangs"]

    def __init__(self):
        self.counts = {f: 0 for f in self.FIELDS}
        self.notes = []

    def add(self, **kw):
        for k, v in kw.items():
            self.counts[k] += v

    def bad(self):
        return sum(self.counts[k] for k in ("lost", "wrong", "panics", "hangs"))


class Torture:
    def __init__(self, args):
        self.bin = args.bin
        self.s3 = args.s3
        self.minio_pid = args.minio_pid
        self.rng = random.Random(args.seed)
        self.work = Path(tempfile.mkdtemp(prefix="tierdb-torture-"))
        self.minio_bin = args.minio_bin
        self.own = None  # the MinIO this run starts and restarts: (process, port, data dir)

    # -- helpers ---------------------------------------------------------------------------

    def db_url(self, name):
        if self.s3:
            return f"{self.s3.rstrip('/')}/{name}-{uuid.uuid4().hex[:8]}"
        return str(self.work / f"{name}-{uuid.uuid4().hex[:8]}")

    def run(self, *args, timeout=HANG_S, env=None):
        """Runs tierdb; returns (returncode or 'hang', stdout, stderr)."""
        try:
            p = subprocess.run([self.bin, *map(str, args)], capture_output=True, text=True,
                               timeout=timeout, env=env)
            return p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            return "hang", e.stdout or "", e.stderr or ""

    @staticmethod
    def panicked(stderr):
        return "panicked" in (stderr if isinstance(stderr, str) else stderr.decode(errors="replace"))

    def stream(self, db, mode, cache, acks, extra=()):
        """Starts a commit stream, SIGKILLs it after `acks` acknowledged batches (or when it
        ends); returns (acked batch numbers, stderr text, hung)."""
        args = [self.bin, "debug", "kv-commit-stream", db, "--create", "--memtable-bytes", "128KiB",
                "--write-mode", mode, "--cache-dir", str(cache), "--cache-bytes", "16MiB",
                "--memory-bytes", "4MiB", "--count", "100000", *extra]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        acked = []
        deadline = time.time() + HANG_S
        for line in p.stdout:
            if line.startswith("acked "):
                acked.append(int(line.split()[1]))
            if len(acked) >= acks or time.time() > deadline:
                break
        hung = len(acked) < acks and p.poll() is None
        p.send_signal(signal.SIGKILL)
        _, err = p.communicate(timeout=HANG_S)
        return acked, err, hung

    def scan_batches(self, db, tier_args=(), env=None):
        """Returns (status, {batch: rows}, values_ok, stderr)."""
        rc, out, err = self.run("kv", "scan", db, "--prefix", "b", *tier_args, env=env)
        batches, values_ok = {}, True
        if rc == 0:
            for line in out.splitlines():
                k, _, v = line.partition("\t")
                i = int(k[1:9])
                batches[i] = batches.get(i, 0) + 1
                values_ok &= v == f"v{i}"
        return rc, batches, values_ok, err

    def judge_scan(self, o, db, acked, tier_args=(), damage_possible=False, env=None):
        rc, batches, values_ok, err = self.scan_batches(db, tier_args, env)
        if rc == "hang":
            o.add(hangs=1)
            return
        if self.panicked(err):
            o.add(panics=1)
            o.notes.append(err[-400:])
            return
        if rc != 0:
            if damage_possible and ("damaged" in err or "checksum" in err.lower() or "corrupt" in err.lower()):
                o.add(detected=1)
            else:
                o.add(wrong=1)
                o.notes.append(f"scan failed without naming damage: {err.strip()[-300:]}")
            return
        missing = [i for i in acked if i not in batches]
        half = [i for i, n in batches.items() if n != ROWS]
        o.add(lost=len(missing), wrong=int(bool(half) or not values_ok))
        if missing:
            o.notes.append(f"{len(missing)} acknowledged batches missing, e.g. {missing[:5]}")
        if half or not values_ok:
            o.notes.append(f"half-visible batches {half[:5]} or wrong values")

    # -- scenarios -------------------------------------------------------------------------

    def kill9(self, o, mode):
        db, cache = self.db_url(f"k9-{mode}"), self.work / f"cache-{uuid.uuid4().hex[:8]}"
        acked, err, hung = self.stream(db, mode, cache, self.rng.randint(20, 1500))
        o.add(cycles=1, acked=len(acked), hangs=int(hung), panics=int(self.panicked(err)))
        self.judge_scan(o, db, acked, ["--cache-dir", cache, "--write-mode", mode])

    def start_race(self, o):
        db = self.db_url("race")
        procs = []
        for k in ("a", "b"):
            cache = self.work / f"cache-{uuid.uuid4().hex[:8]}"
            procs.append((k, subprocess.Popen(
                [self.bin, "kv", "put", db, k, f"value-{k}", "--create", "--cache-dir", str(cache),
                 "--write-mode", "write-back", "--cache-bytes", "8MiB"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            time.sleep(self.rng.uniform(0, 0.15))
        o.add(cycles=1)
        for k, p in procs:
            try:
                _, err = p.communicate(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                p.kill()
                o.add(hangs=1)
                continue
            if self.panicked(err):
                o.add(panics=1)
            if p.returncode != 0:
                if "has a running writer" not in err:
                    o.notes.append(f"put {k} failed unclearly: {err.strip()[-200:]}")
                continue
            o.add(acked=1)
            rc, out, _ = self.run("kv", "get", db, k)
            if rc != 0 or out != f"value-{k}":
                o.add(lost=1)
                o.notes.append(f"put {k} exited 0 and is not in the database")

    def kv_db_with_data(self, name):
        """A local KV database holding a few hundred batches (closed by SIGKILL: WAL + SSTs)."""
        db = str(self.work / f"{name}-{uuid.uuid4().hex[:8]}")
        cache = self.work / f"cache-{uuid.uuid4().hex[:8]}"
        acked, _, _ = self.stream(db, "write-through", cache, 600)
        return db, acked

    def flip_file(self, o, db, acked, files, label):
        if not files:
            o.notes.append(f"no {label} files to flip")
            return
        f = self.rng.choice(files)
        data = bytearray(f.read_bytes())
        if not data:
            return
        at = self.rng.randrange(len(data))
        old = data[at]
        data[at] ^= 1 << self.rng.randrange(8)
        f.write_bytes(bytes(data))
        o.add(cycles=1, acked=len(acked))
        try:
            self.judge_scan(o, db, acked, damage_possible=True)
        finally:
            data[at] = old
            f.write_bytes(bytes(data))

    def flip_manifest(self, o, state):
        if "manifest" not in state:
            state["manifest"] = self.kv_db_with_data("fm")
        db, acked = state["manifest"]
        files = sorted(Path(db).glob("manifest/*.manifest"))
        self.flip_file(o, db, acked, files[-1:], "manifest")

    def flip_sst(self, o, state):
        if "sst" not in state:
            state["sst"] = self.kv_db_with_data("fs")
        db, acked = state["sst"]
        files = sorted(Path(db).glob("wal/*.sst")) + sorted(Path(db).glob("compacted/*.sst"))
        self.flip_file(o, db, acked, files, "SST")

    def flip_segment(self, o, state):
        if "segment" not in state:
            db = str(self.work / f"fseg-{uuid.uuid4().hex[:8]}")
            rc, _, err = self.run("sql", db, "--create", "-c",
                                  "CREATE TABLE t (id BIGINT NOT NULL, v VARCHAR NOT NULL, d DECIMAL(12,2))")
            assert rc == 0, err
            src = self.work / "t.tbl"
            with open(src, "w") as out:
                for i in range(30_000):
                    out.write(f"{i}|name {i * 7 % 1000}|{i % 977}.{i % 100:02d}|\n")
            rc, _, err = self.run("import", db, "t", src)
            assert rc == 0, err
            q = "SELECT sum(id), count(*), min(v), max(v), sum(d) FROM t"
            rc, truth, err = self.run("sql", db, "--format", "csv", "-c", q)
            assert rc == 0, err
            state["segment"] = (db, q, truth)
        db, q, truth = state["segment"]
        files = sorted(Path(db).rglob("*.parquet"))
        f = self.rng.choice(files)
        data = bytearray(f.read_bytes())
        at = self.rng.randrange(len(data))
        old = data[at]
        data[at] ^= 1 << self.rng.randrange(8)
        f.write_bytes(bytes(data))
        o.add(cycles=1)
        try:
            rc, out, err = self.run("sql", db, "--format", "csv", "-c", q)
            if rc == "hang":
                o.add(hangs=1)
            elif self.panicked(err):
                o.add(panics=1)
                o.notes.append(err[-300:])
            elif rc == 0 and out != truth:
                o.add(wrong=1)
                o.notes.append(f"flip at {f.name}:{at} answered {out.strip()!r}, truth {truth.strip()!r}")
            elif rc != 0:
                if "is damaged" in err:
                    o.add(detected=1)
                else:
                    o.add(wrong=1)
                    o.notes.append(f"flip at {f.name}:{at} failed without naming damage: {err.strip()[-300:]}")
        finally:
            data[at] = old
            f.write_bytes(bytes(data))

    def disrupted_stream(self, o, args, start, stop, down_s, env=None, tier_args=()):
        """Runs a commit stream, calls start() (the outage) after 30 acknowledged batches and
        stop() `down_s` later, SIGKILLs the writer once 300 batches were acknowledged after
        the outage ended (or it exited, or HANG_S passed), then checks that every acknowledged
        batch is there. stop() always runs."""
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in p.stdout] and None, daemon=True).start()
        acked, started_at, stopped = [], None, False
        deadline = time.time() + HANG_S + 15
        try:
            while time.time() < deadline and not (stopped and len(acked) >= 300):
                try:
                    line = lines.get(timeout=0.1)
                    if line.startswith("acked "):
                        acked.append(int(line.split()[1]))
                except queue.Empty:
                    if p.poll() is not None and lines.empty():
                        break
                if started_at is None and len(acked) >= 30:
                    start()
                    started_at = time.time()
                if started_at and not stopped and time.time() - started_at > down_s:
                    stop()
                    stopped = True
        finally:
            if started_at and not stopped:
                stop()
        hung = p.poll() is None and time.time() >= deadline
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=HANG_S)
        err = p.stderr.read()
        o.add(cycles=1, acked=len(acked), hangs=int(hung), panics=int(self.panicked(err)))
        if hung:
            o.notes.append(f"the writer neither went on nor exited after the outage: {err.strip()[-300:]}")
        self.judge_scan(o, args[3], acked, tier_args, env=env)

    def store_pause(self, o, mode):
        """A commit stream on MinIO while MinIO is paused (SIGSTOP) for 1 to 8 s, then resumed;
        the writer is SIGKILLed later. Every acknowledged batch must be there."""
        if not (self.s3 and self.minio_pid):
            return False
        db, cache = self.db_url(f"pause-{mode}"), self.work / f"cache-{uuid.uuid4().hex[:8]}"
        args = [self.bin, "debug", "kv-commit-stream", db, "--create", "--write-mode", mode,
                "--cache-dir", str(cache), "--cache-bytes", "16MiB", "--count", "100000"]
        self.disrupted_stream(o, args, lambda: os.kill(self.minio_pid, signal.SIGSTOP),
                              lambda: os.kill(self.minio_pid, signal.SIGCONT), self.rng.uniform(1, 8),
                              tier_args=["--cache-dir", cache, "--write-mode", mode])
        return True

    # -- an object store of our own, to restart -------------------------------------------

    MINIO_ENV = {"MINIO_ROOT_USER": "tortureuser", "MINIO_ROOT_PASSWORD": "torture-secret"}

    def own_env(self):
        port = self.own[1]
        env = dict(os.environ)
        env.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                   AWS_ACCESS_KEY_ID=self.MINIO_ENV["MINIO_ROOT_USER"],
                   AWS_SECRET_ACCESS_KEY=self.MINIO_ENV["MINIO_ROOT_PASSWORD"],
                   AWS_REGION="us-east-1")
        return env

    def own_start(self, port=None, data=None):
        import socket
        import urllib.request

        def free():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            n = s.getsockname()[1]
            s.close()
            return n

        port = port or free()
        data = data or (self.work / "own-minio")
        env = dict(os.environ, **self.MINIO_ENV)
        proc = subprocess.Popen([self.minio_bin, "server", str(data), "--address", f"127.0.0.1:{port}",
                                 "--console-address", f"127.0.0.1:{free()}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/minio/health/live", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("the torture's MinIO exited at start")
                time.sleep(0.1)
        self.own = (proc, port, data)

    def own_url(self, name):
        if self.own is None:
            self.own_start()
            env = self.own_env()
            subprocess.run(["curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                            f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
                            f"{env['AWS_ENDPOINT_URL']}/torture"], check=True)
        return f"s3://torture/{name}-{uuid.uuid4().hex[:8]}"

    def store_restart(self, o, mode):
        """A commit stream while the object store is killed and restarted (same address,
        same data) after 1 to 10 s."""
        if not self.minio_bin:
            return False
        db = self.own_url(f"restart-{mode}")
        cache = self.work / f"cache-{uuid.uuid4().hex[:8]}"
        args = [self.bin, "debug", "kv-commit-stream", db, "--create", "--write-mode", mode,
                "--cache-dir", str(cache), "--cache-bytes", "16MiB", "--count", "100000"]

        def kill():
            self.own[0].kill()
            self.own[0].wait()

        self.disrupted_stream(o, args, kill, lambda: self.own_start(self.own[1], self.own[2]),
                              self.rng.uniform(1, 10), env=self.own_env(),
                              tier_args=["--cache-dir", cache, "--write-mode", mode])
        return True

    def full_device(self, o):
        """Write-back on a cache device too small for its log budget, uploads held back by
        pausing MinIO, so the log's device fills up."""
        if not (self.s3 and self.minio_pid) or os.geteuid() != 0:
            return False
        dev = self.work / f"dev-{uuid.uuid4().hex[:8]}"
        dev.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(dev)]).returncode != 0:
            return False
        try:
            db = self.db_url("full")
            args = [self.bin, "debug", "kv-commit-stream", db, "--create", "--write-mode", "write-back",
                    "--cache-dir", str(dev), "--cache-bytes", "16MiB", "--memory-bytes", "4MiB",
                    "--count", "100000", "--dirty-wait-max", "2s"]
            self.disrupted_stream(o, args, lambda: os.kill(self.minio_pid, signal.SIGSTOP),
                                  lambda: os.kill(self.minio_pid, signal.SIGCONT), self.rng.uniform(3, 10),
                                  tier_args=["--cache-dir", dev, "--write-mode", "write-back"])
        finally:
            subprocess.run(["umount", "-l", str(dev)])
        return True

    # -- row tables under pgbench ----------------------------------------------------------

    def serve(self, db, port):
        log = open(self.work / f"serve-{port}.log", "ab")
        p = subprocess.Popen([self.bin, "serve", db, "--listen", f"127.0.0.1:{port}"],
                             stdout=log, stderr=log, env=dict(os.environ, TIERDB_PASSWORD="pw"))
        deadline = time.time() + HANG_S
        while time.time() < deadline and p.poll() is None:
            if self.psql(port, "SELECT 1")[0] == 0:
                return p
            time.sleep(0.2)
        p.kill()
        return None

    @staticmethod
    def psql(port, sql):
        q = subprocess.run([PSQL, "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "-Atc", sql],
                           capture_output=True, text=True, timeout=HANG_S,
                           env=dict(os.environ, PGPASSWORD="pw"))
        return q.returncode, q.stdout.strip(), q.stderr

    @staticmethod
    def free_port():
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def rows_kill9(self, o, state):
        if not (os.path.exists(PGBENCH) and os.path.exists(PSQL)):
            return False
        env = dict(os.environ, PGPASSWORD="pw")
        port = self.free_port()
        db = state.get("rows-db")
        if db is None:
            db = str(self.work / f"rows-{uuid.uuid4().hex[:8]}")
            self.run("sql", db, "--create", "-c", "SELECT 1")
            server = self.serve(db, port)
            if server is None:
                o.add(hangs=1)
                return
            init = subprocess.run([PGBENCH, "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "-i",
                                   "-s", "1", "-q"], capture_output=True, text=True, env=env,
                                  timeout=HANG_S * 10)
            server.kill()
            server.wait()
            if init.returncode != 0:
                o.notes.append(f"pgbench -i failed: {init.stderr.strip()[-300:]}")
                return
            state["rows-db"] = db
        server = self.serve(db, port)
        if server is None:
            o.add(cycles=1, hangs=1)
            o.notes.append("tierdb serve did not answer after a SIGKILL")
            return
        history_before = int(self.psql(port, "SELECT count(*) FROM pgbench_history")[1] or -1)
        bench = subprocess.Popen([PGBENCH, "-h", "127.0.0.1", "-p", str(port), "-U", "tierdb", "-n",
                                  "-c", "4", "-j", "2", "-T", "60", "-M", "prepared"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(self.rng.uniform(1, 6))
        server.send_signal(signal.SIGKILL)
        server.wait()
        try:
            out, err = bench.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            bench.kill()
            out, err = bench.communicate()
            o.add(hangs=1)
        done = 0
        for line in out.splitlines():
            if line.startswith("number of transactions actually processed:"):
                done = int(line.split(":")[1].split("/")[0])
        o.add(cycles=1, acked=done, panics=int(self.panicked(open(
            self.work / f"serve-{port}.log", errors="replace").read())))
        server = self.serve(db, port)
        if server is None:
            o.add(hangs=1)
            o.notes.append("tierdb serve did not restart after a SIGKILL under pgbench")
            return
        try:
            sums = [self.psql(port, f"SELECT coalesce(sum({c}), 0) FROM {t}")[1] for t, c in (
                ("pgbench_accounts", "abalance"), ("pgbench_tellers", "tbalance"),
                ("pgbench_branches", "bbalance"), ("pgbench_history", "delta"))]
            history_after = int(self.psql(port, "SELECT count(*) FROM pgbench_history")[1] or -1)
            rc, report, verr = self.run("verify", db, "--format", "json")
        finally:
            server.kill()
            server.wait()
        if len(set(sums)) != 1:
            o.add(wrong=1)
            o.notes.append(f"balances disagree after SIGKILL: {sums}")
        if history_after < history_before + done:
            o.add(lost=history_before + done - history_after)
            o.notes.append(f"history {history_before} + {done} acknowledged, {history_after} after")
        if rc != 0:
            o.add(wrong=1)
            o.notes.append(f"tierdb verify: {report.strip()[-300:]} {verr.strip()[-300:]}")

    def flip_wblog(self, o):
        if not (self.s3 and self.minio_pid):
            return False
        db, cache = self.db_url("fwb"), self.work / f"cache-{uuid.uuid4().hex[:8]}"
        args = [self.bin, "debug", "kv-commit-stream", db, "--create", "--write-mode", "write-back",
                "--cache-dir", str(cache), "--cache-bytes", "16MiB", "--count", "100000",
                "--writers", "1"]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        acked = []
        paused = False
        try:
            for line in p.stdout:
                acked.append(int(line.split()[1]))
                if len(acked) == 50:
                    os.kill(self.minio_pid, signal.SIGSTOP)
                    paused = True
                if len(acked) >= 150:
                    break
            p.send_signal(signal.SIGKILL)
            p.communicate(timeout=HANG_S)
        finally:
            if paused:
                os.kill(self.minio_pid, signal.SIGCONT)
        segs = sorted((cache / "wblog").glob("*.twb"))
        o.add(cycles=1, acked=len(acked))
        if not segs:
            o.notes.append("no write-back log segment left to flip")
            return True
        seg = segs[-1]
        data = bytearray(seg.read_bytes())
        # Flip inside the first half, so valid records follow the damaged one.
        at = self.rng.randrange(max(1, len(data) // 2))
        data[at] ^= 1 << self.rng.randrange(8)
        seg.write_bytes(bytes(data))
        self.judge_scan(o, db, acked, ["--cache-dir", cache, "--write-mode", "write-back"],
                        damage_possible=True)
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
    ap.add_argument("--bin", default=os.environ.get("TIERDB_BIN", os.path.join(target, "debug", "tierdb")))
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--s3", help="run the KV scenarios on this s3:// URL (MinIO) instead of a local directory")
    ap.add_argument("--minio-pid", type=int, help="MinIO's pid, to pause it (flip-wblog)")
    ap.add_argument("--minio-bin", help="a MinIO binary, to start and restart a MinIO of this run's own")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--scenarios", default="kill9-write-through,kill9-write-back,start-race,"
                                           "flip-segment,flip-manifest,flip-sst,flip-wblog,"
                                           "pause-write-through,pause-write-back,restart-write-through,"
                                           "restart-write-back,full-device,kill9-rows")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"error: {args.bin} not found; build it (cargo build) or pass --bin")
    t = Torture(args)
    state = {}
    names = [s for s in args.scenarios.split(",") if s]
    runners = {
        "kill9-write-through": lambda o: t.kill9(o, "write-through"),
        "kill9-write-back": lambda o: t.kill9(o, "write-back"),
        "start-race": t.start_race,
        "flip-segment": lambda o: t.flip_segment(o, state),
        "flip-manifest": lambda o: t.flip_manifest(o, state),
        "flip-sst": lambda o: t.flip_sst(o, state),
        "flip-wblog": t.flip_wblog,
        "pause-write-through": lambda o: t.store_pause(o, "write-through"),
        "pause-write-back": lambda o: t.store_pause(o, "write-back"),
        "restart-write-through": lambda o: t.store_restart(o, "write-through"),
        "restart-write-back": lambda o: t.store_restart(o, "write-back"),
        "full-device": t.full_device,
        "kill9-rows": lambda o: t.rows_kill9(o, state),
    }
    unknown = [n for n in names if n not in runners]
    if unknown:
        sys.exit(f"error: unknown scenario(s) {unknown}; choose from {sorted(runners)}")
    outcomes = {n: Outcome() for n in names}
    started = time.time()
    end = started + args.minutes * 60
    print(f"torture: {args.minutes} min, seed {args.seed}, binary {args.bin}, "
          f"{'MinIO ' + args.s3 if args.s3 else 'local directory'}; work in {t.work}", flush=True)
    skipped = set()
    while time.time() < end:
        for n in names:
            if n in skipped or time.time() >= end:
                continue
            ran = runners[n](outcomes[n])
            if ran is False:
                skipped.add(n)
                print(f"  {n}: skipped (needs --s3 and --minio-pid, or pgbench and psql)", flush=True)
        done = sum(o.counts["cycles"] for o in outcomes.values())
        bad = sum(o.bad() for o in outcomes.values())
        print(f"  {time.time() - started:7.0f} s  {done} cycles  {bad} bad", flush=True)
    header = ["scenario"] + Outcome.FIELDS
    rows = [[n] + [str(outcomes[n].counts[f]) for f in Outcome.FIELDS] for n in names if n not in skipped]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print()
    for r in [header] + rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    for n in names:
        for note in outcomes[n].notes[:5]:
            print(f"{n}: {note}")
    result = {n: outcomes[n].counts for n in names if n not in skipped}
    result["_meta"] = {"minutes": args.minutes, "seed": args.seed, "s3": args.s3,
                       "elapsed_s": round(time.time() - started, 1)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if t.own is not None:
        t.own[0].kill()
    sys.exit(1 if any(outcomes[n].bad() for n in names) else 0)


if __name__ == "__main__":
    main()
