"""Where each query's time goes: one `perf record` per query of `tierdb bench queries`
(release build, the warm runs it makes), every sample attributed to one category of work.

A sample's category comes from its call stack (DWARF-unwound), walked from the leaf up: the
first frame that names a kind of work decides (LZ4 inside the Parquet reader is
decompression; a `memcpy` called by the Parquet reader is Parquet decoding; hashbrown called
by the hash join is the hash join). Generic frames (libc's memory and allocation functions,
`core`, `alloc`, `std`, hashbrown, the kernel) are passed over; the Tokio scheduler and
futex waits count as "runtime" only when they are the sample's own work. Two cross-cutting
shares are printed beside the split: samples whose leaf is an allocator or a page fault
("alloc"), and whose leaf is memcpy/memmove/memset ("copy").

Prints one table (percent of each query's samples per group of categories) and the top leaf
symbols of each query; writes profile.txt, profile.json (every category) and profile.png
(stacked bars, seconds split by category) to --out. --rerender re-prints a profile.json.

  python/bench/profile_queries.py --tierdb target/release/tierdb --db DB \
      --queries python/bench/tpch_queries --only q01,q06 --threads 2 --runs 4 --out DIR

Needs `perf` (linux-perf) and a binary with line tables (the release profile keeps them).
Only the samples of the measured runs are counted: `bench queries` makes one warming run
and then --runs more, so the split is taken over the last (runs x best time) seconds of the
recording, which excludes the process's start, opening the database and the warming run
(its first touches of fresh memory and its reads into the DRAM tier).
"""

import argparse
import collections
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

# (category, pattern on a frame's symbol), tried in order on each frame from the leaf up.
CATEGORIES = [
    ("decompress", r"lz4|LZ4_|zstd|ZSTD|snap::|snappy|flate2|miniz|brotli"),
    ("checksum", r"crc32|xxh|blake3"),
    ("tierdb store", r"tierdb_store::|tierdb_objects::|object_store::|slatedb::"),
    ("parquet decode", r"parquet::"),
    ("strings/LIKE", r"arrow_string::|regex|memchr::"),
    ("filter/compare", r"arrow_ord::cmp|arrow_ord::comparison|arrow_select::filter|FilterExec"
                       r"|filter_record_batch|BinaryExpr|InListExpr|in_list|CaseExpr|boolean"),
    ("arithmetic", r"arrow_arith::|numeric::|arrow_buffer::.*(add|sub|mul|div)"),
    ("cast", r"arrow_cast::"),
    ("hash join", r"hash_join|JoinHashMap|join_hash_map|HashJoin|joins::utils"),
    ("other joins", r"joins::|NestedLoopJoin|SortMergeJoin|CrossJoin"),
    ("aggregation", r"aggregates::|GroupValues|group_values|Accumulator|accumulate"
                    r"|functions_aggregate|GroupedHashAggregate|AggregateExec"),
    ("hashing", r"hash_utils|create_hashes|ahash|foldhash|RandomState"),
    ("sort/top-k", r"sorts::|TopK|topk|arrow_ord::sort|lexsort|arrow_row::|SortExec|sort_batch"),
    ("gather (take/concat)", r"arrow_select::take|arrow_select::concat|arrow_select::interleave"
                             r"|BatchCoalescer|coalesce"),
    ("repartition", r"repartition|RepartitionExec"),
    ("planning", r"datafusion_optimizer|datafusion_sql|physical_optimizer|create_physical_plan"
                 r"|SessionState::optimize|datafusion_expr::"),
    ("tierdb tables", r"tierdb_tables::|tierdb_engine::|tierdb_bench::"),
]
COMPILED = [(name, re.compile(p)) for name, p in CATEGORIES]
GENERIC = re.compile(
    r"^(__)?(mem(cpy|move|set|cmp)|__memcmp|bcmp|malloc|free|realloc|calloc|cfree|_int_|"
    r"__libc|__GI_|posix_memalign|aligned_alloc|__rust_|_rjem|je_|mi_)"
    r"|^<?(core|alloc|std|hashbrown)::|^<(alloc|core|std|hashbrown)::|\[unknown\]|^_start$|__clone"
)
ALLOC_LEAF = re.compile(r"malloc|free|realloc|calloc|_int_|__rust_alloc|__rust_dealloc|alloc::alloc"
                        r"|page_fault|handle_mm_fault|clear_page|do_anonymous_page|_rjem|je_|mi_")
COPY_LEAF = re.compile(r"mem(cpy|move|set)|copy_user|copy_mc")
RUNTIME_LEAF = re.compile(r"tokio::|parking_lot|futex|crossbeam|std::thread|sched|schedule|syscall"
                          r"|__x64_sys|entry_SYSCALL|pthread_cond|epoll")
FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def run(cmd, **kw):
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


def samples(perf_data):
    """Yield (time, period, [(symbol, dso)] leaf first) for each sample of a perf.data file."""
    proc = subprocess.Popen(["perf", "script", "-i", str(perf_data), "--no-inline",
                             "-F", "comm,tid,time,period,ip,sym,dso"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    when, period, frames = 0.0, None, []
    for line in proc.stdout:
        if not line.strip():
            if period is not None:
                yield when, period, frames
            period, frames = None, []
            continue
        if not line[0].isspace():
            parts = line.split()
            period = int(parts[-1]) if parts and parts[-1].isdigit() else 1
            stamp = next((p for p in parts if p.endswith(":")), "0:")
            try:
                when = float(stamp[:-1])
            except ValueError:
                when = 0.0
            frames = []
            continue
        m = FRAME.match(line)
        if m:
            frames.append((m.group(1), m.group(2)))
    if period is not None:
        yield when, period, frames
    proc.wait()


def categorize(frames):
    """The category of one sample's stack (leaf first)."""
    leaf = None
    for sym, dso in frames:
        kernel = "kernel" in dso
        if leaf is None and not kernel and not GENERIC.search(sym):
            leaf = sym
            if RUNTIME_LEAF.search(sym):
                return "runtime"
        if kernel or GENERIC.search(sym):
            continue
        for name, pat in COMPILED:
            if pat.search(sym):
                return name
    if frames and all("kernel" in d for _, d in frames):
        return "kernel"
    return "other"


def short(sym, width=70):
    s = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    s = re.sub(r"<[^<>]*>", "<>", s) if len(s) > width else s
    return s if len(s) <= width else s[: width - 1] + "…"


def profile(perf_data, window):
    """The split of the samples in the last `window` seconds of the recording."""
    stamped = list(samples(perf_data))
    end = max((t for t, _, _ in stamped), default=0.0)
    cats = collections.Counter()
    leaves = collections.Counter()
    alloc = copy = total = 0
    for when, period, frames in stamped:
        if not frames or when < end - window:
            continue
        total += period
        cats[categorize(frames)] += period
        leaf_sym = frames[0][0]
        leaves[leaf_sym] += period
        if ALLOC_LEAF.search(leaf_sym):
            alloc += period
        elif COPY_LEAF.search(leaf_sym):
            copy += period
    if not total:
        return {"samples": 0, "categories": {}, "top": [], "alloc": 0.0, "copy": 0.0}
    pct = lambda n: round(100.0 * n / total, 1)  # noqa: E731
    return {
        "samples": total,
        "categories": {k: pct(v) for k, v in cats.most_common()},
        "top": [(short(s), pct(v)) for s, v in leaves.most_common(8)],
        "alloc": pct(alloc),
        "copy": pct(copy),
    }


def bench_seconds(csv_path):
    rows = list(csv.DictReader(open(csv_path)))
    return float(rows[0]["seconds"]) if rows else float("nan")


# Columns of the printed table: (heading, categories summed into it). JSON keeps each one.
GROUPS = [
    ("decomp", ["decompress"]),
    ("parquet", ["parquet decode"]),
    ("store", ["tierdb store", "checksum", "tierdb tables"]),
    ("filter", ["filter/compare", "strings/LIKE"]),
    ("arith", ["arithmetic", "cast"]),
    ("join", ["hash join", "other joins"]),
    ("agg", ["aggregation", "hashing"]),
    ("sort", ["sort/top-k"]),
    ("gather", ["gather (take/concat)", "repartition"]),
    ("plan", ["planning"]),
    ("rest", ["runtime", "kernel", "other"]),
]


def render(results):
    head = f"{'query':<6} {'seconds':>8} " + " ".join(f"{g:>7}" for g, _ in GROUPS)
    head += f" {'alloc':>6} {'copy':>6}"
    lines = ["percent of each query's CPU samples (measured runs) by the work its stack names; "
             "alloc, copy: samples whose leaf is the allocator or a page fault, memcpy/memmove "
             "(counted in the columns too)",
             "store: tierdb's store, checksums and table code; filter: comparisons, LIKE, "
             "selection; agg: aggregation and hashing; gather: take/concat/repartition; "
             "rest: runtime, kernel, unattributed",
             head]
    for q, r in results.items():
        cells = " ".join(f"{sum(r['categories'].get(c, 0.0) for c in cats):>7.1f}" for _, cats in GROUPS)
        lines.append(f"{q:<6} {r['seconds']:>8.3f} {cells} {r['alloc']:>6.1f} {r['copy']:>6.1f}")
    lines.append("")
    lines.append("top leaf symbols (self time, percent of samples)")
    for q, r in results.items():
        lines.append(f"{q}: " + "; ".join(f"{s} {p}" for s, p in r["top"][:5]))
    return "\n".join(lines) + "\n"


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    names = [c for c, _ in CATEGORIES] + ["runtime", "kernel", "other"]
    qs = list(results)
    fig, ax = plt.subplots(figsize=(13, 6))
    bottom = [0.0] * len(qs)
    cmap = plt.get_cmap("tab20")
    for i, c in enumerate(names):
        vals = [results[q]["seconds"] * results[q]["categories"].get(c, 0.0) / 100 for q in qs]
        if not any(vals):
            continue
        ax.bar(qs, vals, bottom=bottom, label=c, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds (query time split by CPU samples)")
    ax.set_title("Where each query's time goes (tierdb, perf samples)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierdb", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--queries", required=True, help="directory of one-query .sql files")
    ap.add_argument("--only", default="", help="comma-separated query names (file stems)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--freq", type=int, default=400, help="samples per second per thread")
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra", default="", help="more `tierdb bench queries` flags, space-separated")
    ap.add_argument("--rerender", action="store_true", help="print --out's profile.json again")
    a = ap.parse_args()
    out = Path(a.out)
    if a.rerender:
        results = json.loads((out / "profile.json").read_text())
        print(render(results))
        return
    out.mkdir(parents=True, exist_ok=True)
    only = {q for q in a.only.split(",") if q}
    files = sorted(p for p in Path(a.queries).glob("*.sql") if not only or p.stem in only)
    if not files:
        sys.exit(f"no .sql files in {a.queries} match --only {a.only!r}")
    results = {}
    for f in files:
        data = out / f"{f.stem}.perf.data"
        csv_path = out / f"{f.stem}.csv"
        run(["perf", "record", "-q", "-F", a.freq, "--call-graph", "dwarf,16384", "-o", data, "--",
             a.tierdb, "bench", "queries", a.db, "--file", f, "--threads", a.threads,
             "--runs", a.runs, "--csv", csv_path, *a.extra.split()])
        seconds = bench_seconds(csv_path)
        r = profile(data, a.runs * seconds)
        r["seconds"] = seconds
        results[f.stem] = r
        data.unlink()
        print(f"{f.stem}: {r['seconds']:.3f} s, {r['samples'] and len(r['categories'])} categories; "
              + ", ".join(f"{k} {v}" for k, v in list(r["categories"].items())[:4]), flush=True)
    text = render(results)
    print(text)
    (out / "profile.txt").write_text(text)
    (out / "profile.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "profile.png")


if __name__ == "__main__":
    main()
