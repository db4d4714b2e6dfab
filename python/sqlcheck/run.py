"""The differential tester: random schemas, data, queries and DML run on tierdb and on
PostgreSQL 15, compared after every statement.

    python -m sqlcheck.run --tierdb target/debug/tierdb --seed 1 --minutes 3
    python -m sqlcheck.run --tierdb … --replay python/sqlcheck/regressions

A round creates 2-3 tables with random columns and rows, then runs random steps (a query,
a DML statement, or a transaction of several ending in COMMIT or ROLLBACK). After each
statement it compares: success or failure (and, if both fail, nothing more); a query's
rows (as a multiset, or in order under ORDER BY … LIMIT); a DML statement's row count and
then the whole table's contents. The first mismatch ends the round: the round's
statements are shrunk (delta debugging: drop statements, then rows of multi-row INSERTs,
as long as the same kind of mismatch remains) and the repro is written as a JSON case to
`--keep` (replayed by `--replay`, and in CI). Where tierdb refuses a statement as not
supported (SQLSTATE 0A000) and PostgreSQL runs it, the round ends as a skip, counted by
the statement's shape. Prints a table of counts and writes JSON with `--json`.
"""

import argparse
import decimal
import hashlib
import json
import math
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sqlcheck import engines  # noqa: E402
from sqlcheck.gen import SKIPS, Gen, Stmt  # noqa: E402


# ---------- comparing ----------
def norm(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return ("num", v)
    return v


def same_value(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    na, nb = isinstance(a, (int, float, decimal.Decimal)), isinstance(b, (int, float, decimal.Decimal))
    if na and nb:
        if isinstance(a, float) or isinstance(b, float) or (
                isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal) and a != b
                and (a.as_tuple().exponent < -2 or b.as_tuple().exponent < -2)):
            fa, fb = float(a), float(b)
            return fa == fb or math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-12)
        return decimal.Decimal(a) == decimal.Decimal(b)
    return a == b


def sort_key(row):
    out = []
    for v in row:
        if v is None:
            out.append((0, "", 0))
        elif isinstance(v, bool):
            out.append((1, str(v), 0))
        elif isinstance(v, (int, float, decimal.Decimal)):
            # Nine significant digits group values equal within the float tolerance; the
            # exact value then orders integers and decimals those digits do not tell apart
            # (123456789012 and 123456789013: found by seed 778).
            f = float(v)
            exact = decimal.Decimal(f"{f:.9e}") if isinstance(v, float) else decimal.Decimal(v)
            out.append((2, f"{f:.9e}" if f else "0", exact))
        else:
            out.append((3, str(v), 0))
    return out


def same_rows(a, b, ordered):
    if len(a) != len(b):
        return False
    if not ordered:
        a, b = sorted(a, key=sort_key), sorted(b, key=sort_key)
    return all(len(x) == len(y) and all(same_value(p, q) for p, q in zip(x, y)) for x, y in zip(a, b))


def numeric_key(r):
    return [float(v) if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool) else v for v in r]


def show(res, limit=8):
    if res[0] == "error":
        return f"ERROR {res[1]}: {res[2]}"
    rows, n = res[1], res[2]
    if rows is None:
        return f"ok, {n} rows changed"
    body = ", ".join(str(tuple(r)) for r in rows[:limit])
    return f"{len(rows)} rows: {body}{' …' if len(rows) > limit else ''}"


class Mismatch(Exception):
    def __init__(self, kind, stmt, pg, td):
        super().__init__(kind)
        self.kind, self.stmt, self.pg, self.td = kind, stmt, pg, td

    def describe(self):
        return (f"{self.kind}\n  statement: {self.stmt.text('tierdb')}\n"
                f"  PostgreSQL: {show(self.pg)}\n  tierdb:     {show(self.td)}")


class Skip(Exception):
    def __init__(self, shape, message):
        super().__init__(shape)
        self.shape, self.message = shape, message


def shape_of(message):
    """A refusal's kind for the skip table: the first clause of tierdb's message."""
    m = re.sub(r"^.*?ERROR:\s*", "", message)
    return m.split(";")[0].strip()[:90]


class Pair:
    def __init__(self, pg_port, td_port):
        self.pg = engines.Conn(engines.pg_dsn(pg_port))
        self.td = engines.Conn(engines.tierdb_dsn(td_port))
        self.statements = 0

    def reset(self, tables=("t0", "t1", "t2")):
        for c in (self.pg, self.td):
            c.run("ROLLBACK")
            for t in tables:
                c.run(f"DROP TABLE IF EXISTS {t}")

    def check(self, stmt):
        """Runs `stmt` on both; raises Mismatch or Skip."""
        pg = self.pg.run(stmt.text("pg"))
        td = self.td.run(stmt.text("tierdb"))
        self.statements += 1
        if pg[0] != td[0]:
            if td[0] == "error" and td[1] == "0A000":
                raise Skip(shape_of(td[2]), td[2])
            # A data exception (class 22) on one side only: evaluation order or constant
            # folding (see gen.SKIPS), never a row of the answer.
            failed = pg if pg[0] == "error" else td
            if str(failed[1]).startswith("22"):
                who = "PostgreSQL" if failed is pg else "tierdb"
                raise Skip(f"{who} alone raised {failed[1]} (evaluation order/folding)", failed[2])
            raise Mismatch("one engine failed" if td[0] == "error" else "tierdb accepted what PostgreSQL refused",
                           stmt, pg, td)
        if pg[0] == "error":
            return
        if stmt.kind == "query":
            if (pg[1] is None) != (td[1] is None) or not same_rows(pg[1] or [], td[1] or [], stmt.ordered):
                raise Mismatch("different rows", stmt, pg, td)
        elif stmt.kind == "dml":
            if pg[2] != td[2]:
                raise Mismatch("different row count", stmt, pg, td)
            if (pg[1] is None) != (td[1] is None) or not same_rows(pg[1] or [], td[1] or [], False):
                raise Mismatch("different rows returned", stmt, pg, td)
            q = Stmt(f"SELECT * FROM {stmt.table}", kind="query")
            a, b = self.pg.run(q.sql), self.td.run(q.sql)
            if a[0] != "ok" or b[0] != "ok" or not same_rows(a[1], b[1], False):
                raise Mismatch("different table contents after the statement", stmt, a, b)

    def replay(self, stmts):
        """Runs a case from a clean slate; returns the Mismatch it ends with, or None."""
        self.reset()
        try:
            for s in stmts:
                self.check(s)
        except Mismatch as m:
            return m
        except Skip:
            return None
        return None


# ---------- shrinking ----------
def split_inserts(stmts):
    out = []
    for s in stmts:
        m = re.match(r"^(INSERT INTO \w+ VALUES )(.*)$", s.sql, re.S)
        if s.kind == "dml" and m and s.pg is None and "RETURNING" not in s.sql:
            rows = split_rows(m.group(2))
            for r in rows:
                out.append(Stmt(m.group(1) + r, kind="dml", table=s.table))
        else:
            out.append(s)
    return out


def split_rows(values):
    rows, depth, start, quote = [], 0, 0, False
    for i, ch in enumerate(values):
        if ch == "'":
            quote = not quote
        elif not quote and ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
            if depth == 0:
                rows.append(values[start:i + 1])
    return rows


def shrink(pair, stmts, kind, budget_s=120):
    """The smallest prefix-preserving subsequence of `stmts` (ending with the failing one)
    that still ends in a mismatch of `kind`."""
    deadline = time.time() + budget_s

    def fails(case):
        m = pair.replay(case)
        return m is not None and m.kind == kind and m.stmt.sql == case[-1].sql

    case = split_inserts(stmts)
    if not fails(case):
        case = list(stmts)
        if not fails(case):
            return stmts
    chunk = max(1, (len(case) - 1) // 2)
    while chunk >= 1 and time.time() < deadline:
        i, changed = 0, False
        while i < len(case) - 1 and time.time() < deadline:
            if case[i].kind == "ddl":
                i += 1
                continue
            trial = case[:i] + case[i + chunk:] if i + chunk < len(case) else None
            if trial and fails(trial):
                case, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return case


def keep_case(directory, seed, case, mismatch):
    os.makedirs(directory, exist_ok=True)
    body = [s.to_json() for s in case]
    digest = hashlib.sha1(json.dumps(body).encode()).hexdigest()[:10]
    path = os.path.join(directory, f"case-{digest}.json")
    with open(path, "w") as f:
        json.dump({"found_by_seed": seed, "mismatch": mismatch.kind, "detail": mismatch.describe(),
                   "statements": body}, f, indent=1)
        f.write("\n")
    return path


# ---------- the run ----------
def run(args):
    stats = {"seeds": [], "rounds": 0, "statements": 0, "queries": 0, "dml": 0, "transactions": 0,
             "tables": 0, "mismatches": [], "skips": {}, "both_failed": 0}
    with engines.postgres() as pg_port, engines.tierdb(args.tierdb) as td_port:
        pair = Pair(pg_port, td_port)
        if args.replay:
            return replay_dir(pair, args.replay)
        seed = args.seed if args.seed is not None else random.randrange(1 << 31)
        stats["seeds"].append(seed)
        rng = random.Random(seed)
        deadline = time.time() + args.minutes * 60
        progress = Progress(args.minutes * 60)
        while time.time() < deadline and (args.max_rounds is None or stats["rounds"] < args.max_rounds):
            stats["rounds"] += 1
            gen = Gen(rng)
            pair.reset()
            trace = []
            try:
                for s in gen.schema():
                    trace.append(s)
                    pair.check(s)
                stats["tables"] += len(gen.tables)
                for _ in range(args.steps):
                    step = gen.step()
                    for s in step:
                        trace.append(s)
                        try:
                            pair.check(s)
                        except Skip as sk:
                            # A refused query changes nothing: the round goes on, unless it
                            # was inside a transaction (tierdb's is now aborted).
                            if s.kind != "query" or len(step) > 1:
                                raise
                            stats["skips"][sk.shape] = stats["skips"].get(sk.shape, 0) + 1
                            trace.pop()
                            continue
                        stats["queries" if s.kind == "query" else "dml" if s.kind == "dml" else "transactions"] += 1
                    if time.time() > deadline:
                        break
            except Skip as sk:  # a refused change: the engines' tables now differ
                stats["skips"][sk.shape] = stats["skips"].get(sk.shape, 0) + 1
            except Mismatch as m:
                print(f"\nMISMATCH (seed {seed}, round {stats['rounds']}): {m.describe()}", flush=True)
                small = shrink(pair, trace, m.kind)
                final = pair.replay(small) or m
                path = keep_case(args.keep, seed, small, final) if args.keep else None
                print(f"shrunk to {len(small)} statements" + (f", kept as {path}" if path else "") + ":", flush=True)
                for s in small:
                    print("   ", s.text("tierdb"), flush=True)
                stats["mismatches"].append({"kind": final.kind, "statement": final.stmt.sql, "case": path,
                                            "statements": len(small)})
                if len(stats["mismatches"]) >= args.max_mismatches:
                    break
            progress.update(stats)
        stats["statements"] = pair.statements
        progress.done()
    report(stats, args)
    return 1 if stats["mismatches"] else 0


def replay_dir(pair, directory):
    failed = 0
    files = sorted(f for f in os.listdir(directory) if f.endswith(".json"))
    for name in files:
        with open(os.path.join(directory, name)) as f:
            case = json.load(f)
        stmts = [Stmt.from_json(d) for d in case["statements"]]
        m = pair.replay(stmts)
        print(f"{name}: {'ok' if m is None else 'MISMATCH ' + m.describe()}")
        failed += m is not None
    print(f"{len(files)} kept cases replayed, {failed} mismatched")
    return 1 if failed else 0


class Progress:
    def __init__(self, total_s):
        self.start, self.total, self.last = time.time(), total_s, 0
        self.tty = sys.stderr.isatty()

    def update(self, stats):
        now = time.time()
        if now - self.last < (1 if self.tty else 30):
            return
        self.last = now
        pct = min(100, 100 * (now - self.start) / max(1, self.total))
        line = (f"[{pct:5.1f}%] rounds {stats['rounds']}, queries {stats['queries']}, dml {stats['dml']}, "
                f"mismatches {len(stats['mismatches'])}")
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def done(self):
        if self.tty:
            print(file=sys.stderr)


def report(stats, args):
    rows = [("seeds", ", ".join(map(str, stats["seeds"]))), ("rounds (random schemas)", stats["rounds"]),
            ("tables created", stats["tables"]), ("statements run on both", stats["statements"]),
            ("  queries compared", stats["queries"]), ("  DML compared (rows + table contents)", stats["dml"]),
            ("  BEGIN/COMMIT/ROLLBACK", stats["transactions"]), ("mismatches", len(stats["mismatches"])),
            ("statements tierdb refused with 0A000 (skips)", sum(stats["skips"].values()))]
    w = max(len(r[0]) for r in rows)
    print()
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    if stats["skips"]:
        print("skipped shapes (tierdb: not supported):")
        for k, v in sorted(stats["skips"].items(), key=lambda kv: -kv[1]):
            print(f"  {v:5d}  {k}")
    print("deliberate differences the generator avoids:")
    for s in SKIPS:
        print("  -", s)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(stats, skipped_by_design=SKIPS), f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tierdb", required=True, help="the tierdb binary")
    ap.add_argument("--seed", type=int, help="random seed (default: a random one, printed)")
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--steps", type=int, default=40, help="steps per round")
    ap.add_argument("--max-rounds", type=int)
    ap.add_argument("--max-mismatches", type=int, default=5)
    ap.add_argument("--keep", help="directory to write shrunk failing cases to")
    ap.add_argument("--replay", help="replay the kept cases in this directory instead")
    ap.add_argument("--json", help="write the statistics as JSON here")
    sys.exit(run(ap.parse_args()))


if __name__ == "__main__":
    main()
