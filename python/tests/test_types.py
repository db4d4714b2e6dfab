"""Column types through `tierdb serve`, against PostgreSQL 15 as the oracle: the same table
(SMALLINT, INT, BIGINT, REAL, DOUBLE PRECISION, NUMERIC(p,s) of up to 38 digits and of 65,
NUMERIC without precision,
VARCHAR(n), VARCHAR, CHAR(n), TEXT,
BOOLEAN, DATE, TIMESTAMP, TIMESTAMPTZ, TIME, BYTEA, UUID, JSON, JSONB) on both, the same rows written with driver
parameters, then compared: the values read back, the column types and typmods the
RowDescription reports, COPY TO STDOUT in text and CSV byte for byte, COPY FROM STDIN of
PostgreSQL's output, the SQLSTATE of values a type refuses, and what
`information_schema.columns` says of each column.

Needs the `tierdb` binary (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import datetime
import decimal
import os
import uuid
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sqlcheck import engines  # noqa: E402

psycopg = pytest.importorskip("psycopg")
from psycopg.types.json import Json, Jsonb  # noqa: E402

DOC = {"zz": [1, 2.5, None, True], "a": {"k": "v\n\"q\""}, "n": 1.50}

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))

COLUMNS = [
    ("id", "INT NOT NULL"),
    ("s", "SMALLINT"),
    ("i", "INT"),
    ("b", "BIGINT"),
    ("r", "REAL"),
    ("d", "DOUBLE PRECISION"),
    ("n", "NUMERIC(10,2)"),
    ("v", "VARCHAR(5)"),
    ("c", "CHAR(3)"),
    ("t", "TEXT"),
    ("ok", "BOOLEAN"),
    ("day", "DATE"),
    ("ts", "TIMESTAMP"),
    ("tz", "TIMESTAMPTZ"),
    ("raw", "BYTEA"),
    ("u", "UUID"),
    ("j", "JSON"),
    ("jb", "JSONB"),
    ("tm", "TIME"),
    ("vu", "VARCHAR"),
    ("w", "NUMERIC(65,30)"),
    ("nu", "NUMERIC"),
]
UTC = datetime.timezone.utc
ROWS = [
    (1, 32767, 2147483647, 9223372036854775807, 1.5, 0.1, decimal.Decimal("12345678.91"), "abcde", "x", "tab\there",
     True, datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5, 123456),
     datetime.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC), b"\x00\xff\\",
     uuid.UUID("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"), Json(DOC), Jsonb(DOC),
     datetime.time(10, 11, 12, 500000), "no length",
     decimal.Decimal("123456789012345678901234567890.123456789012345678901234567890"),
     decimal.Decimal("3.14159265358979")),
    (2, -32768, -2147483648, -9223372036854775808, -0.25, -1e300, decimal.Decimal("-0.01"), "", "abc", "line\nbreak",
     False, datetime.date(1970, 1, 1), datetime.datetime(1970, 1, 1),
     datetime.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), b"",
     uuid.UUID(int=0), Json([]), Jsonb("text"), datetime.time(23, 59, 59, 999999), "",
     decimal.Decimal("-0.000000000000000000000000000001"),
     decimal.Decimal("-12345678901234567890123456789012345678901234567890.5")),
    (3, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None,
     None, None, None, None),
]


@pytest.fixture(scope="module")
def both():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        pg = psycopg.connect(engines.pg_dsn(pg_port), autocommit=True)
        pg.execute("SET TIME ZONE 'UTC'")
        td = psycopg.connect(engines.tierdb_dsn(t_port), autocommit=True)
        create = "CREATE TABLE ty (%s)" % ", ".join(f"{n} {t}" for n, t in COLUMNS)
        marks = ", ".join(["%s"] * len(COLUMNS))
        for conn in (pg, td):
            conn.execute(create)
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO ty VALUES ({marks})", ROWS)
        yield pg, td
        pg.close()
        td.close()


def sqlstates(both, sql):
    """The SQLSTATE `sql` fails with on PostgreSQL and on tierdb (None: it ran)."""
    states = []
    for conn in both:
        try:
            conn.execute(sql)
            states.append(None)
        except psycopg.Error as e:
            states.append(e.sqlstate)
    return states


def test_values_read_back_as_postgresql_reads_them(both):
    pg, td = both
    want = pg.execute("SELECT * FROM ty ORDER BY id").fetchall()
    got = td.execute("SELECT * FROM ty ORDER BY id").fetchall()
    for w, g in zip(want, got):
        for (name, _), wv, gv in zip(COLUMNS, w, g):
            assert gv == wv, f"column {name}: tierdb {gv!r}, PostgreSQL {wv!r}"
    assert len(got) == len(want)


def test_result_columns_carry_postgresql_types_and_typmods(both):
    pg, td = both
    sql = "SELECT * FROM ty"
    # Name, type OID and type size (pg_type.typlen: the width of a fixed-size type, psycopg's
    # None for a variable-length one).
    want = [(d.name, d.type_code, d.internal_size) for d in pg.execute(sql).description]
    got = [(d.name, d.type_code, d.internal_size) for d in td.execute(sql).description]
    assert got == want
    # The declared length and precision reach the client (psycopg's display sizes).
    cols = {d.name: d for d in td.execute(sql).description}
    pcols = {d.name: d for d in pg.execute(sql).description}
    for name in ("v", "c", "n", "w", "nu"):
        assert (cols[name].display_size, cols[name].precision, cols[name].scale) == \
            (pcols[name].display_size, pcols[name].precision, pcols[name].scale), name


# A NUMERIC column and a cast keep their typmod (psycopg's precision and scale); a literal, an
# expression and an aggregate are `numeric` without one, as PostgreSQL describes them.
NUMERIC_TYPMODS = [
    "SELECT n, 1.5, n + 1, CAST(n AS NUMERIC(12,3)), CAST(1.5 AS NUMERIC(6,2)) FROM ty",
    "SELECT n, sum(n), max(n) FROM ty GROUP BY n",
    "SELECT x.n, x.n * 2 FROM (SELECT n FROM ty) x ORDER BY 1",
]


@pytest.mark.parametrize("sql", NUMERIC_TYPMODS)
@pytest.mark.parametrize("prepare", [False, True])
def test_numeric_typmods_are_postgresqls(both, sql, prepare):
    pg, td = both
    want = pg.execute(sql, prepare=prepare).description
    got = td.execute(sql, prepare=prepare).description
    assert [(d.type_code, d.precision, d.scale) for d in got] == \
        [(d.type_code, d.precision, d.scale) for d in want]


# Casts to VARCHAR(n) and CHAR(n) cut (and pad) to the length and are described with it.
LENGTH_CASTS = [
    "SELECT CAST('abcdef' AS varchar(3)), 'abcdef'::char(2), 'xy'::char(4), 12345::varchar(2), "
    "'é€x'::character varying(2), 'a'::character",
    "SELECT 'xy'::char(4) || '|', 'xy'::char(4) = 'xy', 'xy '::char(3) = 'xy'::char(5), "
    "length('xy'::char(4)), upper('ab'::char(3)), 'xy'::char(4)::varchar(3) || '|'",
    "SELECT id, v::varchar(2), c::char(1), v::char(6), c::varchar(10) || '|' FROM ty ORDER BY id",
]


@pytest.mark.parametrize("sql", LENGTH_CASTS)
def test_casts_to_a_length_cut_and_describe_as_postgresql(both, sql):
    pg, td = both
    want = pg.execute(sql)
    got = td.execute(sql)
    assert [(d.type_code, d.display_size) for d in got.description] == \
        [(d.type_code, d.display_size) for d in want.description]
    assert got.fetchall() == want.fetchall()


@pytest.mark.parametrize("key", ["", "PRIMARY KEY"])
def test_char_values_stored_into_text_columns_lose_their_padding(both, key):
    """A CHAR(n) value INSERTed or assigned by UPDATE into a TEXT or VARCHAR column is cast
    to text, which strips its trailing spaces (`bpchar.rs`; the differential tester's case
    in `sqlcheck/regressions/`); into a CHAR(m) column it stays padded. Also an INSERT …
    SELECT that names a column twice, which DataFusion refused (`colnames.rs`)."""
    pg, td = both
    statements = [
        "DROP TABLE IF EXISTS cs", "DROP TABLE IF EXISTS cd",
        "CREATE TABLE cs (id INT, c CHAR(4))",
        "INSERT INTO cs VALUES (1, 'a'), (2, 'ab  '), (3, NULL)",
        f"CREATE TABLE cd (id INT {key}, v VARCHAR, v5 VARCHAR(5), t TEXT, c3 CHAR(3))",
        "INSERT INTO cd SELECT id, c, c, c, c FROM cs",
        "INSERT INTO cd VALUES (4, CAST('x' AS CHAR(3)), 'y'::char(4), 'z'::char(2), 'w'::char(2))",
        "INSERT INTO cd VALUES (5, 'p  ', 'q'::char(3), 'r', 's'), (6, 'k'::char(2), 'l', 'm', 'n')",
        "UPDATE cd SET v = CAST(v AS CHAR(6)), t = (SELECT c FROM cs WHERE id = 2), "
        "v5 = 'q'::char(3) WHERE id = 1",
        "UPDATE cd SET t = c3 WHERE id = 2",
        # VARCHAR and TEXT values keep their trailing spaces, copied or assigned.
        "INSERT INTO cd SELECT id + 10, v, v5, t, c3 FROM cd WHERE id >= 5",
        "UPDATE cd SET t = v WHERE id = 15",
    ]
    for conn in both:
        for sql in statements:
            conn.execute(sql)
    sql = ("SELECT id, v || '|', v5 || '|', t || '|', c3 || '|', octet_length(c3) "
           "FROM cd ORDER BY id")
    assert td.execute(sql).fetchall() == pg.execute(sql).fetchall()


@pytest.mark.parametrize("options", ["", "(FORMAT csv)"])
def test_copy_to_writes_what_postgresql_writes(both, options):
    pg, td = both
    cols = ", ".join(n for n, _ in COLUMNS)
    sql = f"COPY (SELECT {cols} FROM ty ORDER BY id) TO STDOUT {options}"

    def copy_out(conn):
        with conn.cursor() as cur:
            with cur.copy(sql) as copy:
                return b"".join(bytes(b) for b in copy)

    assert copy_out(td).decode() == copy_out(pg).decode()


def test_copy_from_reads_postgresql_output(both):
    pg, td = both
    with pg.cursor() as cur:
        with cur.copy("COPY ty TO STDOUT") as copy:
            data = b"".join(bytes(b) for b in copy)
    td.execute("CREATE TABLE ty2 (%s)" % ", ".join(f"{n} {t}" for n, t in COLUMNS))
    with td.cursor() as cur:
        with cur.copy("COPY ty2 FROM STDIN") as copy:
            copy.write(data)
    want = pg.execute("SELECT * FROM ty ORDER BY id").fetchall()
    assert td.execute("SELECT * FROM ty2 ORDER BY id").fetchall() == want


@pytest.mark.parametrize("sql", [
    "INSERT INTO ty (id, v) VALUES (10, 'abcdef')",
    "INSERT INTO ty (id, c) VALUES (10, 'abcd')",
    "UPDATE ty SET v = 'toolong' WHERE id = 1",
    "INSERT INTO ty (id, u) VALUES (10, 'a0eebc99')",
    "INSERT INTO ty (id, j) VALUES (10, '{\"a\": 1')",
    "INSERT INTO ty (id, jb) VALUES (10, '[1,]')",
    "UPDATE ty SET jb = 'nope' WHERE id = 1",
    "SELECT 'x'::uuid",
    "INSERT INTO ty (id, tm) VALUES (10, '25:00')",
    "INSERT INTO ty (id, tm) VALUES (10, 'noon')",
])
def test_refused_values_get_postgresql_sqlstates(both, sql):
    pg, td = both
    states = sqlstates(both, sql)
    assert states[1] == states[0], f"tierdb {states[1]}, PostgreSQL {states[0]}"
    assert td.execute("SELECT count(*) FROM ty").fetchone()[0] == len(ROWS), "nothing written"


FLOATS = [30000000000.0, 1e15, 123456789012345.0, 1e300, -1e-300, 0.0001, 0.00001, 1.0 / 3.0, 0.1, -0.0]


def test_floats_are_written_as_postgresql_writes_them(both):
    """The text of REAL and DOUBLE values in query results (what psql shows) and COPY."""
    import shutil
    import subprocess
    pg, td = both
    for conn in (pg, td):
        conn.execute("CREATE TABLE fl (i INT NOT NULL, d DOUBLE PRECISION, r REAL)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO fl VALUES (%s, %s, %s)",
                            [(i, x, x if x == 0 or 1e-30 < abs(x) < 1e30 else None) for i, x in enumerate(FLOATS)])
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed (scripts/test.sh installs it)")

    def psql(dsn):
        p = subprocess.run(["psql", dsn, "-X", "-A", "-t", "-c", "SELECT d, r FROM fl ORDER BY i"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    pg_port = pg.info.port
    td_port = td.info.port
    want = psql(engines.pg_dsn(pg_port))
    got = psql(engines.tierdb_dsn(td_port))
    assert got == want


def test_timestamptz_is_shown_in_the_session_time_zone(both):
    """Stored as UTC instants, shown in the session's TimeZone; a value written without an
    offset is in that zone; an unknown zone is refused (22023)."""
    import shutil
    import subprocess
    pg, td = both
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed (scripts/test.sh installs it)")
    for conn in (pg, td):
        conn.execute("CREATE TABLE tzs (i INT NOT NULL, t TIMESTAMPTZ)")
        conn.execute("INSERT INTO tzs VALUES (1, '2024-06-01 12:00:00+00'), (2, '2024-01-15 23:30:00-05'), (3, NULL)")

    def psql(dsn):
        p = subprocess.run(["psql", dsn, "-X", "-A", "-t",
                            "-c", "SET TIME ZONE 'Europe/Berlin'",
                            "-c", "SELECT i, t FROM tzs ORDER BY i",
                            "-c", "COPY (SELECT t FROM tzs ORDER BY i) TO STDOUT",
                            "-c", "SELECT TIMESTAMPTZ '2024-06-01 12:00:00' = TIMESTAMPTZ '2024-06-01 10:00:00+00'"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    assert psql(engines.tierdb_dsn(td.info.port)) == psql(engines.pg_dsn(pg.info.port))

    def pgtz(dsn):  # libpq sends PGTZ as the startup parameter timezone
        p = subprocess.run(["psql", dsn, "-X", "-A", "-t", "-c", "SELECT t FROM tzs ORDER BY i"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PGTZ="America/New_York"))
        assert p.returncode == 0, p.stderr
        return p.stdout

    assert pgtz(engines.tierdb_dsn(td.info.port)) == pgtz(engines.pg_dsn(pg.info.port))
    assert sqlstates(both, "SET TIME ZONE 'Mars/Olympus_Mons'") == ["22023", "22023"]


def test_integer_literals_are_typed_as_postgresql_types_them(both):
    pg, td = both
    sql = "SELECT 1 AS a, 2147483648 AS b, 1 + 1 AS c, -5 AS d, CAST(1 AS BIGINT) AS e"
    want = [d.type_code for d in pg.execute(sql).description]
    got = [d.type_code for d in td.execute(sql).description]
    assert got == want == [23, 20, 23, 23, 20]
    assert sqlstates(both, "SELECT 2147483647 + 1") == ["22003", "22003"]


NUMERIC_QUERIES = [
    # A number with a point or an exponent is NUMERIC, not DOUBLE PRECISION.
    "SELECT 0.1 + 0.2 AS a, 1.5 AS b, -0.05 AS c, 1.5e-3 AS e, 2.5E3::numeric AS f, 0.00 AS g, "
    "pg_typeof(1.5)::text AS h",
    # More digits than a 128-bit decimal's 28 that the drivers' decimals hold, and than 38.
    "SELECT 12345678901234567890123456789.5 AS a, -99999999999999999999999999999999999999 AS b",
    "SELECT 123456789012345678901234567890123456789012.5 AS a",
    "SELECT n, n * 2 AS twice, n + 0.005 AS more, n / 2 AS half FROM ty ORDER BY id",
    # DATE ± INTERVAL is a TIMESTAMP.
    "SELECT date '2024-01-01' + interval '1.5 hours' AS a, "
    "date '2024-03-01' - interval '30 minutes' AS b, interval '1 hour' + day AS c FROM ty ORDER BY id",
    # Casts to integers round as PostgreSQL rounds: NUMERIC half away from zero, floats
    # to the nearest even (`pgarith.rs` rule 5); also the casts INSERT makes.
    "SELECT 2.5::int AS a, (-2.5)::int AS b, 2.5::float8::int AS c, 3.5::float8::int AS d, "
    "2.5::real::int AS e, CAST(99.99 AS bigint) AS f, (r * 3)::smallint AS g, d::bigint AS h "
    "FROM ty WHERE id = 1",
    # INTERVAL times and divided by a number (`intervalmul.rs`).
    "SELECT interval '1 day' * 1.5 AS a, 3 * interval '1 hour' AS b, interval '1 mon' / 7 AS c, "
    "interval '1 mon 1 day 1 hour' * 2.7 AS d, interval '10 min' * s AS e, "
    "ts - interval '1 day' * 2 AS f, NULL::interval AS g FROM ty ORDER BY id",
]


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("sql", NUMERIC_QUERIES)
def test_numbers_and_intervals_compute_as_in_postgresql(both, sql, binary):
    pg, td = both
    want = pg.cursor(binary=binary).execute(sql)
    got = td.cursor(binary=binary).execute(sql)
    assert [d.type_code for d in got.description] == [d.type_code for d in want.description]
    assert got.fetchall() == want.fetchall()


def test_numeric_quotients_have_sixteen_significant_digits(both):
    """PostgreSQL gives a NUMERIC quotient at least 16 significant digits (`1.0 / 3` has
    20); Arrow's rule gave 5 (`0.33333`)."""
    pg, td = both
    sql = "SELECT 1.0 / 3, 2 / 3.0, 7 / 2.0, 1 / 7.000"
    want = pg.execute(sql).fetchone()
    got = td.execute(sql).fetchone()
    for w, g in zip(want, got):
        assert isinstance(g, decimal.Decimal)
        assert abs(g - w) < decimal.Decimal("1e-15"), (g, w)


def test_now_is_timestamptz(both):
    pg, td = both
    want = pg.execute("SELECT now()").description[0].type_code
    assert td.execute("SELECT now()").description[0].type_code == want == 1184


def test_result_columns_name_their_table_and_column_as_postgresql_does(both):
    """RowDescription's table OID and column number (what pgjdbc's getTableName, pgx's
    TableOID and node-postgres' tableID read): set for a plain column of a table, also
    aliased and through a join, zero for a computed one; in the extended protocol (a
    prepared statement) and the simple one."""
    sql = "SELECT ty.v, ty.id AS x, ty.id + 1 AS y, t2.c FROM ty JOIN ty AS t2 ON ty.id = t2.id ORDER BY 2"
    got = {}
    for name, conn in zip(("pg", "tierdb"), both):
        oid = conn.execute("SELECT oid FROM pg_catalog.pg_class WHERE relname = 'ty'").fetchone()[0]
        assert oid, name
        extended = conn.execute(sql).pgresult
        simple = conn.pgconn.exec_(sql.encode())
        got[name] = [[("ty" if r.ftable(i) == oid else r.ftable(i), r.ftablecol(i)) for i in range(r.nfields)]
                     for r in (extended, simple)]
    assert got["tierdb"] == got["pg"]
    assert got["pg"][0][2] == (0, 0)


JSON_QUERIES = [
    # PostgreSQL's -> (a member as JSON), ->> (as text), by key and by index (negative from
    # the end), a missing member NULL, chained; on JSON (as written) and JSONB (normalized).
    "SELECT id, jb->'a', jb->'a'->>'k', jb->>'n', jb->'zz'->1, jb->'zz'->> -1, jb->'nope', "
    "j->'zz', j->>'n', j->'a'->'k' FROM ty ORDER BY id",
    "SELECT id FROM ty WHERE jb->'a'->>'k' = 'v\n\"q\"' ORDER BY id",
    "SELECT '{\"b\": 1, \"a\": [1, 2.50, 1e2], \"b\": \"x\", \"ccc\": {}}'::jsonb",
    "SELECT '{\"b\": 1,  \"a\":2}'::json, '{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}'::uuid",
    # The text PostgreSQL keeps: JSON as written, JSONB normalized (through COPY, which
    # sends each value's text).
    "COPY_TEXT SELECT '{\"b\": 1, \"a\": [1, 2.50, 1e2, -0], \"b\": \"x\\u0041\", \"ccc\": {}}'::jsonb, "
    "' [1,  2] '::json",
    "SELECT u FROM ty WHERE u = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' ORDER BY 1",
    # #> and #>> (a path as a text array; array steps are integers), @> and <@ (jsonb
    # containment: objects by key, arrays as sets, a top-level scalar in an array).
    "SELECT id, jb #> '{a,k}', jb #>> '{zz,-1}', jb #> '{zz,x}', j #>> '{a}', jb #> '{}' "
    "FROM ty ORDER BY id",
    "SELECT id, jb @> '{\"a\": {\"k\": \"v\\n\\\"q\\\"\"}}', jb @> '{\"zz\": [true, 1]}', "
    "jb @> '{\"zz\": [[1]]}', jb @> '\"text\"', jb @> '{\"n\": 1.5}', "
    "'{\"n\": 1.50}' <@ jb FROM ty ORDER BY id",
    "SELECT '[1, 2, [1, 3]]'::jsonb @> '[1, 3]', '[1, 2, [1, 3]]'::jsonb @> '[[1, 3]]', "
    "'[\"foo\", \"bar\"]'::jsonb @> '\"foo\"', '{\"a\": 1}'::jsonb @> '{}', "
    "'[]'::jsonb @> '{}', '1.0'::jsonb @> '1'",
    # ? (a top-level key, a string element of a top-level array, or the string itself),
    # ?| and ?& (any or all of a text array; NULL elements ignored; NULL operands NULL).
    "SELECT id, jb ? 'a', jb ? 'zz', jb ? 'k', jb ?| array['nope', 'n'], jb ?& array['a', 'n'], "
    "jb ?& array['a', NULL], jb ?| array[]::text[], jb ?& array[]::text[] FROM ty ORDER BY id",
    "SELECT '[\"a\",\"b\"]'::jsonb ? 'a', '\"a\"'::jsonb ? 'a', '1'::jsonb ? '1', "
    "'[\"a\", [\"b\"]]'::jsonb ? 'b', '[\"x\"]'::jsonb ?& array['x'], NULL::jsonb ?| array['a'], "
    "'{\"a\": 1}'::jsonb ?| NULL::text[]",
    # TIME: compared, ordered, shifted by an interval (wrapping at midnight), in text.
    "SELECT id, tm, tm < '12:00', tm + interval '90 minutes' FROM ty ORDER BY tm, id",
    "COPY_TEXT SELECT id, tm, tm - interval '10 hours' FROM ty ORDER BY id",
    # A cast to text is text, not the type it cast from.
    "SELECT '{}'::jsonb::text, jb::text, u::text, CAST(j AS text), v::text, u FROM ty "
    "ORDER BY id",
]


@pytest.mark.parametrize("sql", JSON_QUERIES)
def test_json_and_uuid_queries_answer_as_postgresql(both, sql):
    pg, td = both
    if sql.startswith("COPY_TEXT "):
        def copy_out(conn):
            with conn.cursor() as cur:
                with cur.copy(f"COPY ({sql[len('COPY_TEXT '):]}) TO STDOUT") as copy:
                    return b"".join(bytes(b) for b in copy).decode()
        assert copy_out(td) == copy_out(pg)
        return
    want = pg.execute(sql)
    got = td.execute(sql)
    assert [d.type_code for d in got.description] == [d.type_code for d in want.description]
    assert got.fetchall() == want.fetchall()


def test_gen_random_uuid_is_a_uuid(both):
    pg, td = both
    for conn in both:
        cur = conn.execute("SELECT gen_random_uuid() AS a, gen_random_uuid() AS b")
        assert cur.description[0].type_code == 2950
        a, b = cur.fetchone()
        assert isinstance(a, uuid.UUID) and a != b and a.version == 4


def test_uuid_and_jsonb_in_binary_results(both):
    """PostgreSQL's binary forms: a UUID's 16 bytes, JSONB's version byte then its text,
    TIME's microseconds."""
    pg, td = both
    sql = "SELECT u, j, jb, tm FROM ty ORDER BY id"
    want = pg.cursor(binary=True).execute(sql).fetchall()
    assert td.cursor(binary=True).execute(sql).fetchall() == want


def test_information_schema_columns_answers_as_postgresql(both):
    """PostgreSQL's 44 columns and names (`character varying`, `udt_name` int4, lengths,
    precisions), as dbt, Grafana and DBeaver read them; only the database name differs."""
    pg, td = both
    sql = ("SELECT * FROM information_schema.columns WHERE table_schema = 'public' "
           "AND table_name = 'ty' ORDER BY ordinal_position")
    want_cur, got_cur = pg.execute(sql), td.execute(sql)
    names = [d.name for d in want_cur.description]
    assert [d.name for d in got_cur.description] == names
    want, got = want_cur.fetchall(), got_cur.fetchall()
    assert len(got) == len(want) == len(COLUMNS)
    for w, g in zip(want, got):
        for name, wv, gv in zip(names, w, g):
            if name in ("table_catalog", "udt_catalog"):
                continue
            assert gv == wv, f"{w[3]}.{name}: tierdb {gv!r}, PostgreSQL {wv!r}"


def test_create_table_as_keeps_declared_types_as_postgresql(both):
    """CREATE TABLE … AS SELECT keeps each column's declared type (VARCHAR(5) stays
    `character varying(5)`, UUID stays uuid), as PostgreSQL's does; the columns say it in
    information_schema.columns."""
    pg, td = both
    sql = ("SELECT column_name, data_type, udt_name, character_maximum_length, "
           "numeric_precision, numeric_scale FROM information_schema.columns "
           "WHERE table_schema = 'public' AND table_name = 'ty_as' ORDER BY ordinal_position")
    got = []
    for conn in (pg, td):
        conn.execute("CREATE TABLE ty_as AS SELECT * FROM ty")
        try:
            got.append(conn.execute(sql).fetchall())
        finally:
            conn.execute("DROP TABLE ty_as")
    assert len(got[0]) == len(COLUMNS)
    assert got[1] == got[0]


NAMED_QUERIES = [
    "SELECT count(*), 1 + 1, 'a'::text, '{}'::jsonb, '{}'::jsonb::text, upper(v), max(i), "
    "s + 1, CAST(i AS bigint), coalesce(i, 0), CASE WHEN i > 0 THEN 1 END, "
    "CASE WHEN i > 0 THEN 1 ELSE i END, sum(i), 1::integer, 2.5::double precision, "
    "date '2024-01-01', interval '1 day', (SELECT max(s) FROM ty), "
    "i AS named, ty.i FROM ty GROUP BY v, i, s",
    "SELECT count(i), count(s) FROM ty",
    "SELECT *, 1 + 1 FROM (SELECT id, v FROM ty) sub ORDER BY id",
    "SELECT 1 UNION ALL SELECT 2 AS x",
    # Repeated names (DataFusion refuses them in a projection; PostgreSQL does not).
    "SELECT i, CAST(i AS bigint), i FROM ty ORDER BY 1, 2",
    "SELECT count(i), count(s), i FROM ty GROUP BY i ORDER BY count(i), i",
    # Catalog queries, as drivers and tools read their columns by name.
    "SELECT count(*), max(c.relname), c.relkind FROM pg_catalog.pg_class c "
    "WHERE c.relname = 'ty' GROUP BY c.relkind",
    "SELECT n.nspname, count(*) FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid "
    "WHERE c.relname = 'ty' GROUP BY n.nspname",
    "SELECT 2.5::int, 1.0 / 3, interval '1 day' * 2",
]


@pytest.mark.parametrize("sql", NAMED_QUERIES)
def test_result_columns_are_named_as_postgresql_names_them(both, sql):
    pg, td = both
    for prepare in (False, True):  # simple and extended protocol
        want = [d.name for d in pg.execute(sql, prepare=prepare).description]
        got = [d.name for d in td.execute(sql, prepare=prepare).description]
        assert got == want, f"prepare={prepare}"


WIDE_SCRIPT = [
    "CREATE TABLE wide_k (a NUMERIC(60,10) PRIMARY KEY, b TEXT)",
    "INSERT INTO wide_k VALUES (1.5, 'a'), (-2.25, 'b'), "
    "(99999999999999999999999999999999999999999999.1, 'c'), (0.00000000005, 'd')",
    "UPDATE wide_k SET b = b || '!' WHERE a > 1",
    "DELETE FROM wide_k WHERE a = -2.25",
]
WIDE_QUERIES = [
    "SELECT * FROM wide_k ORDER BY a",
    "SELECT * FROM wide_k WHERE a BETWEEN 0 AND 2 ORDER BY a",
    "SELECT sum(a), min(a), max(a), count(*) FROM wide_k",
    "SELECT w, w * 2, w + 1, -w FROM ty ORDER BY id",
    "SELECT id FROM ty WHERE w > 0 ORDER BY id",
]


@pytest.mark.parametrize("binary", [False, True])
def test_numeric_of_more_than_38_digits_is_stored_and_keyed_as_postgresql(both, binary):
    """NUMERIC(p,s) past 38 digits (Prisma's default DECIMAL(65,30)) is Arrow's Decimal256:
    in Parquet segments (ty), row tables with it as the key, and results."""
    pg, td = both
    for conn in both:
        conn.execute("DROP TABLE IF EXISTS wide_k")
        for sql in WIDE_SCRIPT:
            conn.execute(sql)
    for sql in WIDE_QUERIES:
        want = pg.cursor(binary=binary).execute(sql)
        got = td.cursor(binary=binary).execute(sql)
        assert [d.type_code for d in got.description] == [d.type_code for d in want.description], sql
        assert got.fetchall() == want.fetchall(), sql
    # A parameter wider than 38 digits.
    big = decimal.Decimal("12345678901234567890123456789012345678901234567.5")
    for conn in both:
        conn.execute("INSERT INTO wide_k VALUES (%s, 'p')", (big,), binary=binary)
    want = pg.execute("SELECT a FROM wide_k WHERE b = 'p'").fetchall()
    assert td.execute("SELECT a FROM wide_k WHERE b = 'p'").fetchall() == want == [(big,)]


UNCONSTRAINED_SCRIPT = [
    "CREATE TABLE un_k (k NUMERIC PRIMARY KEY, v NUMERIC)",
    "CREATE TABLE un_c (a NUMERIC, b INT)",
    "INSERT INTO un_k VALUES (1.5, 2), (-0.000001, 10.25), "
    "(123456789012345678901234567890.125, -7), (0, NULL)",
    "INSERT INTO un_c VALUES (19.99, 1), (-3, 2), (0.1, 3), (NULL, 4), (1e20, 5)",
    "UPDATE un_k SET v = v * 3 WHERE k > 0",
    "DELETE FROM un_k WHERE k = 0",
]
UNCONSTRAINED_QUERIES = [
    "SELECT * FROM un_k ORDER BY k",
    "SELECT * FROM un_k WHERE k BETWEEN -1 AND 2 ORDER BY k",
    "SELECT k + v, k - v, k * 2, -k FROM un_k ORDER BY k",
    "SELECT sum(a), min(a), max(a), count(a) FROM un_c",
    "SELECT a, a * b, a + 0.05, a::int, a::float8 FROM un_c WHERE a < 1000 ORDER BY b",
    "SELECT 1.5::numeric, CAST(2 AS DECIMAL), NUMERIC '3.25', '-0.5'::numeric, "
    "12345678901234567890123456789012345::numeric",
    "SELECT b FROM un_c WHERE a = 19.99",
]


@pytest.mark.parametrize("binary", [False, True])
def test_numeric_without_precision_keeps_each_value_as_postgresql(both, binary):
    """NUMERIC without precision (and casts to it) keeps every value PostgreSQL keeps, up
    to 20 digits after the point, in row tables (as the key) and columnar ones; it is
    described as `numeric` with no typmod. Values compare as numbers: PostgreSQL shows the
    digits each was written with (`1.50`), tierdb drops the fraction's trailing zeros."""
    pg, td = both
    for conn in both:
        conn.execute("DROP TABLE IF EXISTS un_k")
        conn.execute("DROP TABLE IF EXISTS un_c")
        for sql in UNCONSTRAINED_SCRIPT:
            conn.execute(sql)
    for sql in UNCONSTRAINED_QUERIES:
        want = pg.cursor(binary=binary).execute(sql)
        got = td.cursor(binary=binary).execute(sql)
        assert [d.type_code for d in got.description] == [d.type_code for d in want.description], sql
        assert got.fetchall() == want.fetchall(), sql
    cols = td.execute("SELECT k, v FROM un_k").description
    assert [(c.precision, c.scale) for c in cols] == [(None, None), (None, None)]
    # Shown without trailing zeros, where PostgreSQL shows the written digits.
    assert td.execute("SELECT 1.5::numeric::text || '', a FROM un_c WHERE b = 5").fetchone()[1] \
        == decimal.Decimal("100000000000000000000")
    shown = td.execute("SELECT '2.50'::numeric").fetchone()[0]
    assert str(shown) == "2.5"
    with pytest.raises(psycopg.Error) as e:
        td.execute("INSERT INTO un_k VALUES (1.5, 0)")
    assert e.value.sqlstate == "23505"
    assert e.value.diag.message_detail == "Key (k)=(1.5) already exists."


def test_a_precision_past_76_is_refused_with_the_limit_named(both):
    _, td = both
    with pytest.raises(psycopg.Error) as e:
        td.execute("CREATE TABLE too_wide (x NUMERIC(100,2))")
    assert e.value.sqlstate == "0A000"
    assert "76" in str(e.value)


VIOLATIONS = [
    "CREATE TABLE vio (id INT PRIMARY KEY, email TEXT NOT NULL, n INT)",
    "CREATE UNIQUE INDEX vio_email ON vio (email)",
    "INSERT INTO vio VALUES (1, 'a@x', 1)",
]


@pytest.mark.parametrize("sql", [
    "INSERT INTO vio VALUES (1, 'b@x', 2)",
    "INSERT INTO vio VALUES (2, 'a@x', 2)",
    "INSERT INTO vio VALUES (3, NULL, 2)",
    "UPDATE vio SET email = NULL WHERE id = 1",
])
def test_constraint_violations_carry_postgresqls_fields(both, sql):
    """23505 and 23502 send DETAIL and the schema, table, column and constraint names as
    fields (ORMs map a violation to a form error by them: Ecto by `constraint`)."""
    pg, td = both
    for conn in both:
        conn.execute("DROP TABLE IF EXISTS vio")
        for s in VIOLATIONS:
            conn.execute(s)

    def diag(conn):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
        d = e.value.diag
        return (e.value.sqlstate, d.message_primary, d.message_detail if d.sqlstate == "23505" else None,
                d.schema_name, d.table_name, d.column_name, d.constraint_name)

    assert diag(td) == diag(pg)


TO_CHAR_FORMATS = [
    "999", "000", "9999.99", "FM9999.99", "9G999D99", "9,999.00", "S999", "999S", "999MI",
    "999PR", "FM999", "0.00", "FM0.00", "99.9", "L999", "SG999", "PL999", "9.99EEEE",
    "FM9,999,999.999", "$999.99", "FM990.00", "FM999,999,990.00", "0,000", ".99", "\"n=\"99",
]


@pytest.mark.parametrize("fmt", TO_CHAR_FORMATS)
def test_to_char_formats_numbers_as_postgresql(both, fmt):
    """to_char(number, format) (tochar.rs) equals PostgreSQL's for integers, NUMERIC and
    DOUBLE PRECISION: signs, padding, rounding, overflow (#), fill mode, EEEE."""
    pg, td = both
    values = "(VALUES (0), (5), (-5), (12), (-1234), (123456789)) v(x)"
    numerics = ("(VALUES (0.0), (0.5), (-0.5), (1234.5), (-1234.5), (0.001), (-0.0001), "
                "(2.5), (1234567.891), (99.995)) v(x)")
    floats = "(VALUES (0.25::float8), (-1.5::float8), (1234.5678::float8), (1e-5::float8)) v(x)"
    for source in (values, numerics, floats):
        sql = f"SELECT x, to_char(x, '{fmt}') FROM {source} ORDER BY x"
        assert td.execute(sql).fetchall() == pg.execute(sql).fetchall(), sql
    # A column, and NULLs.
    sql = f"SELECT id, to_char(n, '{fmt}'), to_char(i, '{fmt}'), to_char(d, '{fmt}') FROM ty ORDER BY id"
    assert td.execute(sql).fetchall() == pg.execute(sql).fetchall(), sql


def test_to_char_refuses_roman_numerals_with_their_name(both):
    _, td = both
    with pytest.raises(psycopg.Error) as e:
        td.execute("SELECT to_char(5, 'RN')")
    assert "RN" in str(e.value)


TO_CHAR_TIME_FORMATS = [
    "YYYY-MM-DD HH24:MI:SS", "yyyy-mm-dd hh24:mi:ss.us", "HH12:MI AM, MS", "HH:MI a.m.",
    "Month DD, YYYY", "FMMonth FMDDth, YYYY", "Dy Mon DD", "DAY|day|Day", "DDD D ID W WW IW Q CC J",
    "IYYY-IW-ID IDDD", "Y,YYY YYY YY Y", "RM rm FMRM", "\"Q\"Q SSSS", "DDth DDTH FMDDth", "AD B.C.",
]


@pytest.mark.parametrize("fmt", TO_CHAR_TIME_FORMATS)
def test_to_char_formats_dates_and_timestamps_as_postgresql(both, fmt):
    """to_char(date or timestamp, format) reads PostgreSQL's patterns (tochar_time.rs), not
    chrono's: it answered the format itself ('YYYY-MM-DD') for every row."""
    pg, td = both
    stamps = ("(VALUES (timestamp '2024-03-05 14:07:09.123456'), (timestamp '2024-12-30 00:00:00'), "
              "(timestamp '1999-01-01 12:30:00'), (timestamp '2024-02-29 23:59:59.999999')) v(x)")
    sql = f"SELECT x, to_char(x, '{fmt}') FROM {stamps} ORDER BY x"
    assert td.execute(sql).fetchall() == pg.execute(sql).fetchall(), sql
    sql = f"SELECT id, to_char(ts, '{fmt}'), to_char(tz, '{fmt}') FROM ty ORDER BY id"
    assert td.execute(sql).fetchall() == pg.execute(sql).fetchall(), sql


def test_to_char_shows_timestamptz_in_the_session_time_zone(both):
    pg, td = both
    sql = "SELECT id, to_char(tz, 'YYYY-MM-DD HH24:MI:SS TZ OF') FROM ty ORDER BY id"
    try:
        for conn in both:
            conn.execute("SET TIME ZONE 'America/New_York'")
        assert td.execute(sql).fetchall() == pg.execute(sql).fetchall()
    finally:
        for conn in both:
            conn.execute("SET TIME ZONE 'UTC'")
