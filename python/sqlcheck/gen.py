"""Random schemas, rows, queries and DML for the differential tester (SQLancer-style).

Everything is generated from one `random.Random`, so a seed names a run (the RETURNING
clause a third of the INSERTs get is drawn from a generator seeded by the statement, so
adding it left every seed's statements as they were). A statement is a `Stmt`: the SQL
both engines run (or one text per engine where tierdb's dialect differs: CREATE TABLE …
ORDER BY), and what to compare after it (a DML's row count, returned rows and table).

Deliberate differences, skipped by the generator (listed by `SKIPS`):
  - types the generator does not make (BYTEA, SMALLINT, REAL, NUMERIC without precision,
    arrays, JSON, UUID): BOOLEAN, INT, BIGINT, DOUBLE, VARCHAR, CHAR(4), DATE, TIMESTAMP,
    TIMESTAMPTZ and DECIMAL(10,2) only;
  - NaN and infinities (not generated as values);
  - collation: the oracle runs with the C collation (byte order), as tierdb compares strings;
  - UPDATE … FROM over a source with several rows per target row (PostgreSQL picks one
    "not readily predictable" row): the FROM source is grouped to one row per key;
  - avg() and float sums are compared with a relative tolerance of 1e-9 (PostgreSQL sums
    float8 in another order and computes avg(int) as numeric).
"""

import random
import zlib
from dataclasses import dataclass, field

SKIPS = [
    "types the generator does not make: TIME, BYTEA, SMALLINT, REAL, "
    "VARCHAR(n), UUID, JSON (tierdb has them; python/tests/test_types.py compares them with "
    "PostgreSQL), INTERVAL, NUMERIC without precision, arrays (tierdb lacks them)",
    "NaN and +/-Infinity values",
    "CAST(NULL AS CHAR(n)) as the only character branch of a CASE of literals: PostgreSQL "
    "types the CASE character (trailing spaces ignored), tierdb text (a NULL stays a plain cast)",
    "collation: the oracle runs with LC_COLLATE=C (tierdb orders strings by bytes)",
    "UPDATE ... FROM with several source rows per target row (PostgreSQL's pick is unspecified)",
    "float sums and avg() compared with relative tolerance 1e-9",
    "x NOT IN (subquery) under OR or NOT: tierdb refuses it with 0A000 (DataFusion's mark "
    "join is not null-aware: it was true where PostgreSQL says NULL); such statements are "
    "counted as skips",
    "upper()/lower() of non-ASCII letters: the oracle runs with LC_CTYPE=C.UTF-8",
    "errors that depend on evaluation order or constant folding: PostgreSQL skips the right "
    "side of a true OR and folds constant expressions when planning (an overflow fails even "
    "over no rows); tierdb evaluates both sides and per row. Where only one engine raised a "
    "data exception (SQLSTATE class 22) it is counted apart, not as a wrong answer",
]

TYPES = {
    # key: (tierdb type, PostgreSQL type)
    "int": ("INT", "INT"),
    "bigint": ("BIGINT", "BIGINT"),
    "double": ("DOUBLE", "DOUBLE PRECISION"),
    "varchar": ("VARCHAR", "VARCHAR"),
    "date": ("DATE", "DATE"),
    "decimal": ("DECIMAL(10,2)", "DECIMAL(10,2)"),
    "bool": ("BOOLEAN", "BOOLEAN"),
    # character(n): trailing spaces insignificant in comparisons, kept in output (bpchar.rs)
    "char": ("CHAR(4)", "CHAR(4)"),
    # Timestamps: wall-clock, and instants (the sessions' TimeZone is UTC on both; zones
    # are exercised by AT TIME ZONE).
    "ts": ("TIMESTAMP", "TIMESTAMP"),
    "tstz": ("TIMESTAMPTZ", "TIMESTAMPTZ"),
}
NUMERIC = {"int", "bigint", "double", "decimal"}
KEYABLE = {"int", "bigint", "varchar", "date", "char", "decimal"}
ORDERED = NUMERIC | {"varchar", "date", "char", "ts", "tstz"}
TIMESTAMPS = {"ts", "tstz"}

EDGE = {
    "int": [0, 1, -1, 7, 42, 2147483647, -2147483648, 100, -100],
    "bigint": [0, 1, -1, 9223372036854775807, -9223372036854775808, 4294967296, 123456789012],
    "double": [0.0, 1.5, -2.25, 1e300, -1e-300, 3.0, 0.1, 1e-5, 123456.789],
    "varchar": ["", "a", "A", "abc", "abd", "z", "ä", "O'Reilly", " lead", "trail ", "a%b", "_"],
    "date": ["1970-01-01", "2000-02-29", "2024-01-01", "2024-12-31", "1999-12-31", "2038-01-19"],
    "decimal": ["0.00", "1.50", "-1.50", "12345678.99", "-0.01", "100.00", "3.14"],
    "bool": [True, False],
    "char": ["", "a", "ab", "abcd", " a", "a b", "ab  ", "Z"],
    # DST changes in America/New_York, a leap day, the last microsecond of a day.
    "ts": ["1970-01-01 00:00:00", "2024-03-10 02:30:00", "2024-11-03 01:30:00",
           "1999-12-31 23:59:59.999999", "2000-02-29 12:00:00", "2024-01-01 00:00:00"],
    "tstz": ["1970-01-01 00:00:00+00", "2024-03-10 07:30:00+00", "2024-11-03 05:30:00+00",
             "2024-07-01 10:00:00-04", "2000-02-29 12:00:00+05:30", "2024-01-01 00:00:00+00"],
}


def literal(ty, v):
    if v is None:
        if ty == "char":
            # Untyped: tierdb cannot tell CAST(NULL AS CHAR(4)) from a VARCHAR cast, and in a
            # CASE of literals PostgreSQL's type follows it (see SKIPS).
            return "NULL"
        # Typed, as a column's NULL is: PostgreSQL refuses `NULL - NULL` (unknown types).
        return f"CAST(NULL AS {TYPES[ty][1]})"
    if ty == "int":
        # Typed: PostgreSQL reads a bare literal as int4, tierdb as BIGINT (issue 27).
        return f"CAST({v} AS INT)"
    if ty == "bigint":
        return f"CAST({v} AS BIGINT)"
    if ty == "double":
        return f"CAST({v!r} AS DOUBLE PRECISION)"
    if ty == "decimal":
        return f"CAST('{v}' AS DECIMAL(10,2))"
    if ty in ("varchar", "char"):
        return "'" + v.replace("'", "''") + "'"
    if ty == "date":
        return f"DATE '{v}'"
    if ty == "ts":
        return f"TIMESTAMP '{v}'"
    if ty == "tstz":
        return f"TIMESTAMPTZ '{v}'"
    if ty == "bool":
        return "TRUE" if v else "FALSE"
    raise ValueError(ty)


@dataclass
class Table:
    name: str
    cols: list  # [(name, type key, not null)]
    sort: str = None
    key: bool = False  # a row table: PRIMARY KEY (c0)

    def col_names(self):
        return [c[0] for c in self.cols]


@dataclass
class Stmt:
    sql: str
    pg: str = None  # PostgreSQL's text where it differs
    kind: str = "query"  # query | dml | ddl | tx
    table: str = None  # dml: the table to compare after it
    ordered: bool = False  # query: rows compared in order
    tags: list = field(default_factory=list)

    def text(self, engine):
        return self.pg if (engine == "pg" and self.pg is not None) else self.sql

    def to_json(self):
        d = {"sql": self.sql, "kind": self.kind}
        for k in ("pg", "table"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.ordered:
            d["ordered"] = True
        return d

    @staticmethod
    def from_json(d):
        return Stmt(d["sql"], d.get("pg"), d.get("kind", "query"), d.get("table"), d.get("ordered", False))


class Gen:
    def __init__(self, rng: random.Random):
        self.r = rng
        self.tables = []

    # ---------- schema and data ----------
    def value(self, ty, nullable=True):
        r = self.r
        if nullable and r.random() < 0.15:
            return None
        if r.random() < 0.6:
            return r.choice(EDGE[ty])
        if ty == "int":
            return r.randint(-50, 50)
        if ty == "bigint":
            return r.randint(-10**12, 10**12)
        if ty == "double":
            return round(r.uniform(-1000, 1000), r.choice([0, 1, 3]))
        if ty == "decimal":
            return f"{r.randint(-99999, 99999) / 100:.2f}"
        if ty in ("varchar", "char"):
            return "".join(r.choice("abcxyzAB ") for _ in range(r.randint(0, 4)))
        if ty == "date":
            return f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        if ty == "bool":
            return r.random() < 0.5
        if ty in TIMESTAMPS:
            v = (f"{r.randint(1990, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                 f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}")
            if r.random() < 0.3:
                v += f".{r.randint(0, 999999):06d}"
            if ty == "tstz":
                v += r.choice(["+00", "+00", "-05", "+05:30", "+01"])
            return v
        raise ValueError(ty)

    def schema(self, ntables=None):
        r = self.r
        self.tables = []
        shared = r.choice(["int", "int", "bigint", "varchar", "date", "char"])  # a joinable column type
        for i in range(ntables or r.randint(2, 3)):
            cols = [(f"c0", shared, r.random() < 0.5)]
            for j in range(1, r.randint(2, 5)):
                cols.append((f"c{j}", r.choice(list(TYPES)), r.random() < 0.3))
            t = Table(f"t{i}", cols)
            keyable = [c for c in cols if c[2] and c[1] != "bool"]
            if keyable and r.random() < 0.7:
                t.sort = r.choice(keyable)[0]
            self.tables.append(t)
        out = []
        for t in self.tables:
            cols = ", ".join(f"{n} {TYPES[ty][0]}{' NOT NULL' if nn else ''}" for n, ty, nn in t.cols)
            pgcols = ", ".join(f"{n} {TYPES[ty][1]}{' NOT NULL' if nn else ''}" for n, ty, nn in t.cols)
            # A row table (PRIMARY KEY (c0)) four times in ten where c0 can be a key, drawn
            # from a generator of its own (as RETURNING is): the main stream stays as it was.
            c0 = t.cols[0]
            own = random.Random(zlib.crc32(f"key {t.name} {cols}".encode()))
            if c0[2] and c0[1] in KEYABLE and own.random() < 0.4:
                t.key = True
                t.sort = None
                cols += ", PRIMARY KEY (c0)"
                pgcols += ", PRIMARY KEY (c0)"
            order = f" ORDER BY ({t.sort})" if t.sort else ""
            out.append(Stmt(f"CREATE TABLE {t.name} ({cols}){order}", f"CREATE TABLE {t.name} ({pgcols})", "ddl"))
        for t in self.tables:
            out.append(self.on_conflict(t, self.insert_values(t, self.r.randint(0, 12)), first=True))
        return out

    def insert_values(self, t, n=None):
        n = self.r.randint(1, 5) if n is None else n
        if n == 0:
            return Stmt(f"SELECT count(*) FROM {t.name}", kind="query")
        rows = []
        for _ in range(n):
            rows.append("(" + ", ".join(literal(ty, self.value(ty, not nn)) for _, ty, nn in t.cols) + ")")
        return Stmt(f"INSERT INTO {t.name} VALUES {', '.join(rows)}", kind="dml", table=t.name)

    # ---------- expressions ----------
    def cols_of(self, scope, types=None):
        return [(a, n, ty) for a, t in scope for n, ty, _ in t.cols if types is None or ty in types]

    def other_table(self, avoid=None):
        return self.r.choice(self.tables)

    def pred(self, scope, depth=0, conj=True):
        """A random predicate; `conj`: it is a conjunct of the WHERE clause (under AND only),
        where NULL and FALSE act alike."""
        r = self.r
        k = r.random()
        if depth < 2 and k < 0.25:
            op = r.choice(["AND", "OR"])
            c = conj and op == "AND"
            return f"({self.pred(scope, depth + 1, c)} {op} {self.pred(scope, depth + 1, c)})"
        if depth < 2 and k < 0.30:
            return f"(NOT {self.pred(scope, depth + 1, False)})"
        a, n, ty = r.choice(self.cols_of(scope))
        c = f"{a}.{n}"
        k = r.random()
        if k < 0.10:
            return f"{c} IS {'NOT ' if r.random() < 0.5 else ''}NULL"
        if ty == "bool":
            return c if r.random() < 0.5 else f"{c} = {literal(ty, self.value(ty))}"
        if depth < 2 and k < 0.30:
            return self.subquery_pred(scope, c, ty, depth, conj)
        if k < 0.40 and ty in ORDERED:
            lo, hi = sorted([self.value(ty, False), self.value(ty, False)], key=lambda v: (str(type(v)), v))
            return f"{c} {'NOT ' if r.random() < 0.2 else ''}BETWEEN {literal(ty, lo)} AND {literal(ty, hi)}"
        if k < 0.50:
            vals = ", ".join(literal(ty, self.value(ty)) for _ in range(r.randint(1, 4)))
            return f"{c} {'NOT ' if r.random() < 0.3 else ''}IN ({vals})"
        if k < 0.60:
            same = [x for x in self.cols_of(scope, {ty}) if f"{x[0]}.{x[1]}" != c]
            if same:
                b = r.choice(same)
                return f"{c} {r.choice(['=', '<>', '<', '>=']) if ty in ORDERED else '='} {b[0]}.{b[1]}"
        if ty in ("varchar", "char") and k < 0.65:
            return f"{c} LIKE {literal('varchar', r.choice(['a%', '%b%', '_', '%', 'O%', 'ab', 'a___']))}"
        if k < 0.72:
            e, _ = self.expr(scope, ty, 1)
            op = r.choice(["=", "<>", "<", ">=", "IS DISTINCT FROM", "IS NOT DISTINCT FROM"])
            if ty not in ORDERED and op in ("<", ">="):
                op = "="
            return f"{c} {op} {e}"
        op = r.choice(["=", "<>", "<", "<=", ">", ">="]) if ty in ORDERED else r.choice(["=", "<>"])
        return f"{c} {op} {literal(ty, self.value(ty, False))}"

    def subquery_pred(self, scope, c, ty, depth, conj=True):
        r = self.r
        inner = [t for t in self.tables if any(x[1] == ty for x in t.cols)]
        if not inner:
            return f"{c} IS NULL"
        t = r.choice(inner)
        alias = f"s{depth}"
        ic = r.choice([x for x in t.cols if x[1] == ty])[0]
        where = ""
        if r.random() < 0.5:
            where = f" WHERE {self.pred([(alias, t)], depth + 1)}"
        k = r.random()
        if k < 0.35:
            # Under OR/NOT tierdb refuses NOT IN (subquery) (0A000, counted as a skip).
            neg = "NOT " if r.random() < (0.4 if conj else 0.1) else ""
            return f"{c} {neg}IN (SELECT {alias}.{ic} FROM {t.name} {alias}{where})"
        if k < 0.7:
            corr = f"{alias}.{ic} = {c}"
            where = f" WHERE {corr}" + (f" AND {self.pred([(alias, t)], depth + 1)}" if r.random() < 0.4 else "")
            return f"{'NOT ' if r.random() < 0.4 else ''}EXISTS (SELECT 1 FROM {t.name} {alias}{where})"
        agg = r.choice(["max", "min"]) if ty != "bool" else "max"
        if ty == "bool":
            return f"{c} = (SELECT bool_or({alias}.{ic}) FROM {t.name} {alias}{where})"
        op = r.choice(["=", "<", ">=", "<>"])
        return f"{c} {op} (SELECT {agg}({alias}.{ic}) FROM {t.name} {alias}{where})"

    def expr(self, scope, ty=None, depth=0):
        """A random scalar expression and its type (`ty`: of that type)."""
        r = self.r
        cols = self.cols_of(scope, {ty} if ty else None)
        k = r.random()
        if depth >= 2 or k < 0.35:
            if cols and (k < 0.3 or ty is None):
                a, n, cty = r.choice(cols)
                return f"{a}.{n}", cty
            ty = ty or r.choice(list(TYPES))
            return literal(ty, self.value(ty)), ty
        ty = ty or r.choice(list(TYPES))
        k = r.random()
        if k < 0.15:
            a, _ = self.expr(scope, ty, depth + 1)
            b, _ = self.expr(scope, ty, depth + 1)
            return f"CASE WHEN {self.pred(scope, 2, False)} THEN {a} ELSE {b} END", ty
        if k < 0.3:
            a, _ = self.expr(scope, ty, depth + 1)
            b, _ = self.expr(scope, ty, depth + 1)
            return f"{r.choice(['COALESCE', 'NULLIF'])}({a}, {b})", ty
        if ty in ("int", "bigint"):
            a, _ = self.expr(scope, ty, depth + 1)
            k2 = r.random()
            if k2 < 0.25:
                return f"abs({a})", ty
            if k2 < 0.5:
                d = r.choice([1, 2, 3, 7, -4])
                return f"({a} {r.choice(['/', '%'])} CAST({d} AS {TYPES[ty][1]}))", ty
            if k2 < 0.65 and ty == "int":
                s_, _ = self.expr(scope, "varchar", depth + 1)
                return f"CAST(length({s_}) AS INT)", ty
            b, _ = self.expr(scope, ty, depth + 1)
            return f"({a} {r.choice(['+', '-', '*'])} {b})", ty
        if ty == "varchar":
            a, _ = self.expr(scope, ty, depth + 1)
            k2 = r.random()
            if k2 < 0.2:
                return f"{r.choice(['lower', 'upper', 'trim'])}({a})", ty
            if k2 < 0.4:
                return f"substr({a}, {r.randint(1, 3)}, {r.randint(0, 3)})", ty
            if k2 < 0.6:
                b, _ = self.expr(scope, ty, depth + 1)
                return f"({a} || {b})", ty
            if k2 < 0.7:
                # Cut to a length (CHAR(n) also padded), as PostgreSQL's explicit casts do.
                return f"CAST({a} AS {r.choice(['VARCHAR', 'CHAR'])}({r.randint(1, 4)}))", ty
            src = r.choice(["int", "bigint", "decimal", "date", "bool", "ts", "tstz"])
            e, _ = self.expr(scope, src, depth + 1)
            return f"CAST({e} AS VARCHAR)", ty
        if ty == "decimal":
            a, _ = self.expr(scope, ty, depth + 1)
            b, _ = self.expr(scope, ty, depth + 1)
            return f"({a} {r.choice(['+', '-'])} {b})", ty
        if ty == "double":
            a, _ = self.expr(scope, ty, depth + 1)
            return f"({a} * CAST(0.5 AS DOUBLE PRECISION))", ty
        if ty == "bool":
            return f"({self.pred(scope, 2, False)})", ty
        if ty in TIMESTAMPS:
            k2 = r.random()
            if k2 < 0.3:
                # The other kind, converted in a zone (textin/atzone.rs).
                other = "ts" if ty == "tstz" else "tstz"
                a, _ = self.expr(scope, other, depth + 1)
                zone = r.choice(["'UTC'", "'America/New_York'", "'Asia/Kolkata'", "'+03'"])
                return f"({a} AT TIME ZONE {zone})", ty
            a, _ = self.expr(scope, ty, depth + 1)
            if k2 < 0.6:
                span = r.choice(["1 day", "90 minutes", "1 mon", "-2 hours", "1 year 2 days"])
                return f"({a} {r.choice(['+', '-'])} INTERVAL '{span}')", ty
            if k2 < 0.8 and ty == "ts":
                return f"date_trunc('{r.choice(['day', 'month', 'hour', 'year'])}', {a})", ty
            return a, ty
        a, _ = self.expr(scope, ty, depth + 1)
        return a, ty

    # ---------- statements ----------
    def query(self):
        r = self.r
        t = r.choice(self.tables)
        scope = [("x", t)]
        frm = f"{t.name} x"
        if r.random() < 0.3:
            u = r.choice(self.tables)
            kind = r.choice(["JOIN", "LEFT JOIN"])
            frm += f" {kind} {u.name} y ON x.c0 = y.c0"
            scope.append(("y", u))
        where = f" WHERE {self.pred(scope)}" if r.random() < 0.85 else ""
        cols = self.cols_of(scope)
        if r.random() < 0.3:
            g = r.choice(cols)
            nums = [c for c in cols if c[2] in ("int", "bigint", "decimal")]
            aggs = ["count(*)"]
            if nums:
                n = r.choice(nums)
                aggs.append(f"{r.choice(['sum', 'min', 'max', 'count'])}({n[0]}.{n[1]})")
            sel = f"{g[0]}.{g[1]}, " + ", ".join(aggs)
            having = f" HAVING count(*) > {r.randint(0, 2)}" if r.random() < 0.2 else ""
            return Stmt(f"SELECT {sel} FROM {frm}{where} GROUP BY {g[0]}.{g[1]}{having}")
        if r.random() < 0.15:
            return Stmt(f"SELECT count(*) FROM {frm}{where}")
        k = r.random()
        if k < 0.15:
            exprs = [self.expr(scope)[0] for _ in range(r.randint(1, 3))]
            sel = ", ".join(f"{e} AS e{i}" for i, e in enumerate(exprs))
            return Stmt(f"SELECT {sel} FROM {frm}{where}")
        if k < 0.25:
            return self.set_query()
        if k < 0.33:
            g = r.choice(cols)
            o = r.choice([c for c in cols if c != g] or cols)
            if o == g:
                return Stmt(f"SELECT count(*) FROM {frm}{where}")
            nums = [c for c in cols if c[2] in ("int", "bigint", "decimal")]
            w = r.choice(["count(*)"] + [f"sum({c[0]}.{c[1]})" for c in nums])
            f = r.choice([f"{w} OVER (PARTITION BY {g[0]}.{g[1]})",
                          f"rank() OVER (PARTITION BY {g[0]}.{g[1]} ORDER BY {o[0]}.{o[1]} NULLS FIRST)",
                          f"count(*) OVER ()"])
            return Stmt(f"SELECT {g[0]}.{g[1]}, {o[0]}.{o[1]}, {f} AS w FROM {frm}{where}")
        if k < 0.4:
            g = r.choice(cols)
            c = r.choice(cols)
            agg = r.choice([f"count(DISTINCT {c[0]}.{c[1]})", f"min({c[0]}.{c[1]})", f"max({c[0]}.{c[1]})"])
            if c[2] == "bool":
                agg = f"count(DISTINCT {c[0]}.{c[1]})"
            return Stmt(f"WITH q AS (SELECT {g[0]}.{g[1]} AS g, {agg} AS a FROM {frm}{where} "
                        f"GROUP BY {g[0]}.{g[1]}) SELECT g, a FROM q WHERE a IS NOT NULL")
        picked = r.sample(cols, r.randint(1, min(3, len(cols))))
        if r.random() < 0.1:
            picked.append(picked[0])  # a column named twice (SELECT a, a)
        sel = ", ".join(f"{a}.{n}" for a, n, _ in picked)
        distinct = "DISTINCT " if r.random() < 0.15 else ""
        if r.random() < 0.3:
            order = ", ".join(f"{i + 1} {r.choice(['ASC', 'DESC'])} NULLS {r.choice(['FIRST', 'LAST'])}"
                              for i in range(len(picked)))
            # Rows equal in every ORDER BY column are interchangeable: LIMIT is compared
            # only where the order is total over the output.
            return Stmt(f"SELECT {distinct}{sel} FROM {frm}{where} ORDER BY {order} LIMIT {r.randint(0, 6)}",
                        ordered=True)
        return Stmt(f"SELECT {distinct}{sel} FROM {frm}{where}")

    def set_query(self):
        """UNION [ALL] / EXCEPT / INTERSECT of two selects of one column type."""
        r = self.r
        ty = r.choice(list(TYPES))
        sides = []
        for alias in ("p", "q"):
            cands = [t for t in self.tables if any(c[1] == ty for c in t.cols)]
            if not cands:
                return Stmt("SELECT 1")
            t = r.choice(cands)
            c = r.choice([c for c in t.cols if c[1] == ty])[0]
            where = f" WHERE {self.pred([(alias, t)], 1)}" if r.random() < 0.5 else ""
            sides.append(f"SELECT {alias}.{c} FROM {t.name} {alias}{where}")
        op = r.choice(["UNION", "UNION ALL", "EXCEPT", "INTERSECT"])
        return Stmt(f"{sides[0]} {op} {sides[1]}")

    def new_value(self, t, name, ty, nn):
        r = self.r
        k = r.random()
        if k < 0.4:
            return literal(ty, self.value(ty, not nn))
        if k < 0.55:
            return self.expr([(t.name, t)], ty, 1)[0]
        if ty in ("int", "bigint"):
            # Literals typed as the column: PostgreSQL's int4 literals meet an INT column in
            # int4 arithmetic (tierdb types bare integer literals as BIGINT: issue 27).
            k = f"CAST({r.randint(-3, 3)} AS {TYPES[ty][1]})"
            return f"{name} + {k}" if r.random() < 0.7 else f"{name} * CAST(2 AS {TYPES[ty][1]})"
        if ty == "varchar":
            return f"{name} || 'x'" if r.random() < 0.6 else f"upper({name})"
        if ty == "char":
            return f"upper({name})"
        if ty == "bool":
            return f"NOT {name}"
        if ty == "decimal":
            return f"{name} + CAST('0.25' AS DECIMAL(10,2))"
        if ty == "double":
            return f"{name} * 0.5"
        if ty == "date":
            return literal(ty, self.value(ty, False))
        return literal(ty, self.value(ty, not nn))

    def on_conflict(self, t, stmt, first=False):
        """`stmt` (an INSERT into row table `t`) with an ON CONFLICT clause most of the time
        (always DO NOTHING for a table's first rows, so duplicate keys do not leave it
        empty): DO NOTHING with or without the key as target, or DO UPDATE of columns that
        are not the key from `excluded` and the existing row, with a WHERE sometimes. From
        a generator of its own, seeded by the statement."""
        if not t.key or stmt.kind != "dml":
            return stmt
        r = random.Random(zlib.crc32(f"conflict {stmt.sql}".encode()))
        k = r.random()
        if first or k < 0.4:
            clause = "ON CONFLICT DO NOTHING" if r.random() < 0.5 else "ON CONFLICT (c0) DO NOTHING"
        elif k < 0.85:
            others = t.cols[1:]
            sets = []
            for name, ty, nn in r.sample(others, r.randint(1, len(others))):
                j = r.random()
                if j < 0.5:
                    sets.append(f"{name} = excluded.{name}")
                elif j < 0.7 and not nn:
                    sets.append(f"{name} = coalesce({t.name}.{name}, excluded.{name})")
                elif ty in ("int", "bigint"):
                    sets.append(f"{name} = {t.name}.{name} + CAST(1 AS {TYPES[ty][1]})")
                elif ty == "varchar":
                    sets.append(f"{name} = {t.name}.{name} || excluded.{name}")
                else:
                    sets.append(f"{name} = {t.name}.{name}")
            where = ""
            if r.random() < 0.3:
                name = r.choice(others)[0]
                where = f" WHERE excluded.{name} IS {'NOT ' if r.random() < 0.5 else ''}NULL"
            clause = f"ON CONFLICT (c0) DO UPDATE SET {', '.join(sets)}{where}"
        else:
            return stmt
        return Stmt(f"{stmt.sql} {clause}", kind="dml", table=t.name, tags=stmt.tags + ["upsert"])

    def returning(self, t, stmt):
        """`stmt` (an INSERT, UPDATE or DELETE) with a RETURNING clause one time in three, whose rows are
        compared too. Decided by a generator of its own, seeded by the statement, so the
        main stream (and every seed's sequence of statements) is as it was."""
        r = random.Random(zlib.crc32(stmt.sql.encode()))
        if stmt.kind != "dml" or r.random() >= 1 / 3:
            return stmt
        if r.random() < 0.4:
            items = "*"
        else:
            name, ty, _ = r.choice(t.cols)
            items = f"{name}, {t.cols[0][0]} IS NULL AS n0"
            if ty in ("int", "bigint"):
                items += f", {name} + 1 AS plus"
        return Stmt(f"{stmt.sql} RETURNING {items}", kind="dml", table=t.name,
                    tags=stmt.tags + ["returning"])

    def dml_returning(self, t, stmt):
        """An UPDATE or DELETE with RETURNING a third of the time (row and columnar tables;
        the rows are compared as a multiset, as a query's)."""
        return self.returning(t, stmt)

    def dml(self):
        r = self.r
        t = r.choice(self.tables)
        k = r.random()
        scope = [(t.name, t)]
        if k < 0.25:
            return self.returning(t, self.on_conflict(t, self.insert_values(t)))
        if k < 0.35:
            return self.returning(t, self.on_conflict(t, Stmt(
                f"INSERT INTO {t.name} SELECT * FROM {t.name} WHERE {self.pred(scope)}", kind="dml", table=t.name)))
        if k < 0.65:
            n = r.randint(1, min(2, len(t.cols)))
            pairs = [(c, self.new_value(t, c, ty, nn)) for c, ty, nn in r.sample(t.cols, n)]
            if t.key:
                # Not the key: PostgreSQL checks a unique key row by row, so `SET c0 = c0 + 1`
                # fails there or not by the rows' physical order; tierdb moves all keys at once.
                pairs = [p for p in pairs if p[0] != "c0"] or [(t.cols[1][0], t.cols[1][0])]
            sets = ", ".join(f"{c} = {v}" for c, v in pairs)
            if r.random() < 0.15:
                u = r.choice(self.tables)
                uty = u.cols[0][1]
                src = f"(SELECT c0, count(*) AS n FROM {u.name} GROUP BY c0) s"
                where = f"{t.name}.c0 = s.c0"
                if r.random() < 0.5:
                    where += f" AND {self.pred(scope)}"
                if uty == t.cols[0][1]:
                    return Stmt(f"UPDATE {t.name} SET {sets} FROM {src} WHERE {where}", kind="dml", table=t.name)
            where = f" WHERE {self.pred(scope)}" if r.random() < 0.9 else ""
            return self.dml_returning(t, Stmt(f"UPDATE {t.name} SET {sets}{where}", kind="dml", table=t.name))
        if r.random() < 0.15:
            u = r.choice(self.tables)
            where = f"{t.name}.c0 = u.c0" + (f" AND {self.pred(scope + [('u', u)])}" if r.random() < 0.6 else "")
            return Stmt(f"DELETE FROM {t.name} USING {u.name} u WHERE {where}", kind="dml", table=t.name)
        where = f" WHERE {self.pred(scope)}" if r.random() < 0.93 else ""
        return self.dml_returning(t, Stmt(f"DELETE FROM {t.name}{where}", kind="dml", table=t.name))

    def step(self):
        """The next few statements: a query, a DML, or a transaction of several."""
        r = self.r
        k = r.random()
        if k < 0.45:
            return [self.query()]
        if k < 0.85:
            return [self.dml()]
        body = [self.dml() for _ in range(r.randint(1, 3))]
        if r.random() < 0.3:
            body.insert(r.randint(0, len(body)), self.query())
        end = r.choice(["COMMIT", "ROLLBACK"])
        out = [Stmt("BEGIN", kind="tx")] + body + [Stmt(end, kind="tx")]
        # After the transaction ends, compare every table it touched.
        for t in {s.table for s in body if s.table}:
            out.append(Stmt(f"SELECT * FROM {t}", kind="query"))
        return out
