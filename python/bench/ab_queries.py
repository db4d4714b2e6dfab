"""A/B of the same queries over several tierdb databases (the same rows loaded two ways, for
example with another `--segment-codec`), or over one database with several flag sets:
`tierdb bench queries` on each in turn, for --rounds rounds, so the machine's drift falls
on every side alike; each query's best time over all rounds is printed, and its ratio to
the first side.

  python/bench/ab_queries.py --tierdb target/release/tierdb \
      --queries python/bench/tpch_queries --side lz4=/tmp/a --side layout=/tmp/b --rounds 3
  python/bench/ab_queries.py … --side on=/tmp/a --side "off=/tmp/a --no-scan-statistics"

Writes ab.csv (query, then seconds per side) to --out when given.
"""

import argparse
import csv
import subprocess
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--queries", required=True, help="directory of one-query .sql files")
    ap.add_argument("--side", action="append", required=True, metavar="TAG=DB [FLAGS]",
                    help="a database and optional `bench queries` flags, space-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    sides = []
    for s in a.side:
        tag, _, rest = s.partition("=")
        if not rest:
            sys.exit(f"--side {s!r}: give TAG=DB [FLAGS]")
        db, *flags = rest.split()
        sides.append((tag, db, flags))
    files = []
    for p in sorted(Path(a.queries).glob("*.sql")):
        files += ["--file", str(p)]
    if not files:
        sys.exit(f"no .sql files in {a.queries}")
    best = {tag: {} for tag, _, _ in sides}
    scratch = Path(a.out or ".") / "ab-scratch.csv"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    for i in range(a.rounds):
        for tag, db, flags in sides:
            print(f"round {i + 1}/{a.rounds}: {tag}", file=sys.stderr, flush=True)
            subprocess.run([a.tierdb, "bench", "queries", db, *files, "--threads", str(a.threads),
                            "--runs", str(a.runs), "--csv", str(scratch), *flags],
                           check=True, capture_output=True, text=True)
            for r in csv.DictReader(open(scratch)):
                q, s = r["query"], float(r["seconds"])
                best[tag][q] = min(best[tag].get(q, float("inf")), s)
    scratch.unlink()
    tags = [t for t, _, _ in sides]
    first = tags[0]
    queries = list(best[first])
    print(f"best of {a.rounds} rounds x {a.runs} runs, seconds; ratio: the side's time / {first}'s")
    print(f"{'query':<8}" + "".join(f"{t:>12}" for t in tags) + "".join(f"{t + '/' + first:>16}" for t in tags[1:]))
    for q in queries:
        row = f"{q:<8}" + "".join(f"{best[t][q]:>12.3f}" for t in tags)
        row += "".join(f"{best[t][q] / best[first][q]:>16.2f}" for t in tags[1:])
        print(row)
    total = {t: sum(best[t].values()) for t in tags}
    print(f"{'total':<8}" + "".join(f"{total[t]:>12.3f}" for t in tags)
          + "".join(f"{total[t] / total[first]:>16.2f}" for t in tags[1:]))
    if a.out:
        with open(Path(a.out) / "ab.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["query", *tags])
            for q in queries:
                w.writerow([q, *(best[t][q] for t in tags)])


if __name__ == "__main__":
    main()
