"""Text read into TIMESTAMPTZ, TIMESTAMP, DATE, TIME and NUMERIC as PostgreSQL reads it
(`crates/tierdb-tables/src/textin/`), against PostgreSQL 15 as the oracle, in a session
whose TimeZone is not UTC: INSERTs of text literals (the casts type coercion plans),
written casts, comparisons of columns with text, and the SQLSTATEs of text that is not a
value; the same text sent as driver parameters; and timestamps cast to text.

Needs the `tierdb` binary (TIERDB_BIN) and PostgreSQL 15 (scripts/postgres.sh)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sqlcheck import engines  # noqa: E402
from test_types import sqlstates  # noqa: E402

psycopg = pytest.importorskip("psycopg")

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/tierdb/target"))
BIN = os.environ.get("TIERDB_BIN", os.path.join(TARGET, "debug", "tierdb"))

# (timestamptz, timestamp, date, time, numeric(10,2), numeric) as text, in PostgreSQL's forms.
TEXTS = [
    ("2024-01-01 10:00:00", "2024-01-01 10:00:00+05", "2024-01-02", "10:11", "1.5", "1e5"),
    ("2024-05-17 10:00", "2024-05-17 10:00", "2024-05-17 10:00", "10:11:12.5", "1.235", "-1.5e-3"),
    ("2024-07-01T10:00:01.5+02", "2024-07-01T10:00:01.5", "2024-7-1", "10:5", "-1.235", "+.5"),
    ("2024-01-17 10:00:00 UTC", "2024-01-17 24:00:00", "1999-12-31", "23:59:59.9999994", "9.995", "1E+2"),
    ("2024-03-10 02:30", "2024-03-10 02:30", "2024-02-29", "00:00", " 7 ", "5."),
    ("2024-11-03 01:30", "2024-11-03 01:30:00.1234565", "1970-01-01", "12:00:00+03", "0.005", "-0"),
    ("2024-06-01 12:00:00 Europe/Berlin", "epoch", "2024-01-01 23:59", "01:02:03", "-0.004", "0.1e1"),
    ("epoch", "2024-02-29 23:59:60", "2024-12-31", "1:2", "99999999.99", "123456789.123456789e-3"),
]
COLUMNS = ["tz", "ts", "d", "tm", "n", "nu"]


@pytest.fixture(scope="module")
def both():
    with engines.postgres() as pg_port, engines.tierdb(BIN) as t_port:
        pg = psycopg.connect(engines.pg_dsn(pg_port), autocommit=True)
        td = psycopg.connect(engines.tierdb_dsn(t_port), autocommit=True)
        for conn in (pg, td):
            conn.execute("SET TIME ZONE 'America/New_York'")
        yield pg, td
        pg.close()
        td.close()


def quote(t):
    return "'" + t.replace("'", "''") + "'"


def create(both, name):
    for conn in both:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TABLE {name} (k INT NOT NULL, tz TIMESTAMPTZ, ts TIMESTAMP, d DATE, "
                     "tm TIME, n NUMERIC(10,2), nu NUMERIC(20,6))")


def filled(both, name):
    """Table `name` made afresh on both servers, with TEXTS inserted as literals."""
    create(both, name)
    for k, texts in enumerate(TEXTS):
        values = ", ".join(quote(t) for t in texts)
        for conn in both:
            conn.execute(f"INSERT INTO {name} VALUES ({k}, {values})")


def rows(conn, sql):
    return conn.execute(sql).fetchall()


def test_inserted_text_is_read_as_postgresql_reads_it(both):
    """Text literals in INSERT … VALUES: wall-clock time in the session's TimeZone for
    TIMESTAMPTZ, offsets dropped for TIMESTAMP, minutes without seconds, 24:00:00, DST
    gaps and folds, exponents and rounding for NUMERIC."""
    filled(both, "lit")
    pg, td = both
    sql = "SELECT * FROM lit ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)
    # NUMERIC's text form too: its scale.
    sql = "SELECT k, n::text, nu::text FROM lit ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)


def test_text_parameters_are_read_as_postgresql_reads_them(both):
    """The same text sent as driver parameters (psycopg sends a str untyped; the server
    reads it as the column's type, `tierdb-pgwire/src/timeparams.rs`)."""
    create(both, "par")
    for k, texts in enumerate(TEXTS):
        for conn in both:
            conn.execute("INSERT INTO par VALUES (%s, %s, %s, %s, %s, %s, %s)", (k, *texts))
    pg, td = both
    sql = "SELECT * FROM par ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)
    # And compared: text parameters against the columns.
    for k, texts in enumerate(TEXTS):
        sql = "SELECT k FROM par WHERE tz = %s AND ts = %s AND d = %s AND tm = %s ORDER BY k"
        assert td.execute(sql, texts[:4]).fetchall() == pg.execute(sql, texts[:4]).fetchall()


@pytest.mark.parametrize("sql", [
    "SELECT '2024-05-17 10:00'::timestamptz AS a, '2024-05-17 10:00+02'::timestamp AS b, "
    "CAST('2024-05-17 10:00' AS date) AS c, '10:00'::time AS d, '1e5'::numeric AS e, "
    "'-2.5e-1'::numeric(5,1) AS f",
    "SELECT timestamptz '2024-01-01 00:00' AS a, timestamp '2024-01-01 00:00 America/Chicago' AS b, "
    "date_trunc('month', timestamp '2024-05-17 10:00') AS c",
    "SELECT '2024-01-01 10:00'::timestamptz = '2024-01-01 15:00:00+00'::timestamptz AS a, "
    "'2024-06-30 20:00:00 Asia/Tokyo'::timestamptz AS b",
])
def test_written_casts_read_text_as_postgresql_reads_it(both, sql):
    pg, td = both
    want = pg.execute(sql)
    got = td.execute(sql)
    assert [d.type_code for d in got.description] == [d.type_code for d in want.description]
    assert got.fetchall() == want.fetchall()


@pytest.mark.parametrize("where", [
    "tz = '2024-01-01 10:00'",
    "tz > '2024-05-17 10:00'",
    "tz < '2024-06-01 06:00:00-04'",
    "ts >= '2024-05-17 10:00'",
    "ts = '2024-01-01 10:00:00'",
    "d = '2024-5-17'",
    "d BETWEEN '2024-01-01' AND '2024-06-30 23:00'",
    "tm > '10:11'",
    "n = '1.24'",
    "nu = '1e5'",
    "tz IN ('2024-01-01 10:00', '2024-03-10 02:30')",
])
def test_columns_compared_with_text_as_postgresql_compares(both, where):
    pg, td = both
    filled(both, "cmp")
    sql = f"SELECT k FROM cmp WHERE {where} ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)


@pytest.mark.parametrize("sql", [
    "SELECT 'noon'::timestamp",
    "SELECT '2024-02-30'::date",
    "SELECT '2024-05-17 25:00'::timestamptz",
    "SELECT '2024-13-01'::timestamp",
    "SELECT '2024-05-17 10:00 Mars/Olympus'::timestamptz",
    "SELECT '2024-05'::date",
    "SELECT '25:00'::time",
    "SELECT 'abc'::numeric",
    "SELECT '1e'::numeric(5,2)",
    "SELECT '1.2.3'::numeric",
])
def test_text_that_is_not_a_value_fails_with_postgresql_sqlstates(both, sql):
    assert sqlstates(both, sql)[1] == sqlstates(both, sql)[0]
    assert sqlstates(both, sql)[0] is not None


def test_limits_tierdb_has_are_named(both):
    """NaN and 24:00:00 are values in PostgreSQL that tierdb's types do not hold: refused
    with a message that says so, not a parse error."""
    _, td = both
    with pytest.raises(psycopg.Error) as e:
        td.execute("SELECT 'NaN'::numeric")
    assert e.value.sqlstate == "0A000" and "finite" in str(e.value)
    with pytest.raises(psycopg.Error) as e:
        td.execute("SELECT '24:00:00'::time")
    assert "23:59:59.999999" in str(e.value)


@pytest.mark.parametrize("expr", [
    "tz::text", "ts::text", "tm::text", "d::text", "'at ' || ts", "CAST(tz AS VARCHAR)",
    "ts::varchar(10)", "concat(tz, '!')", "tz || ''", "upper(ts::text)",
])
def test_timestamps_cast_to_text_are_written_as_postgresql_writes_them(both, expr):
    """The other way (rule 7): a space, not `T`; a TIMESTAMPTZ in the session's zone with
    its offset; no trailing zeros in a fraction."""
    pg, td = both
    filled(both, "outs")
    sql = f"SELECT k, {expr} AS x FROM outs ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)


@pytest.mark.parametrize("text", [
    "1 day", "1 day 02:00:00", "-1 days +02:00:00", "1 year 2 mons -3 days", "@ 1 hour ago",
    "P1DT2H", "02:00:00", "1.5 hours", "1 week", "1 mon 2 days 03:04:05.5", "-02:30",
    "3 days ago", "1.25 mon", "1.5 years", "90",
])
def test_interval_text_is_read_as_postgresql_reads_it(both, text):
    """INTERVAL text in PostgreSQL's forms, its own output among them (`textin/interval.rs`;
    the literal syntax through `parsefix.rs` rule 9)."""
    pg, td = both
    sql = f"SELECT INTERVAL {quote(text)} AS a, {quote(text)}::interval AS b, " \
          f"timestamp '2024-01-31 10:00' + {quote(text)}::interval AS c"
    assert rows(td, sql) == rows(pg, sql)


def test_copied_text_is_read_as_postgresql_reads_it(both):
    """COPY FROM reads the same forms (`import/fields.rs`): TIMESTAMPTZ text without an
    offset is the session's wall-clock time (it was read in UTC), minutes without seconds,
    zone names; then a bad value fails the COPY, copying nothing."""
    create(both, "cp")
    data = "".join(f"{k}\t" + "\t".join(texts[:4]) + "\t\\N\t\\N\n"
                   for k, texts in enumerate(TEXTS))
    for conn in both:
        with conn.cursor().copy("COPY cp FROM STDIN") as copy:
            copy.write(data)
    pg, td = both
    sql = "SELECT * FROM cp ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)
    for bad in ["9\t2024-02-30 10:00\t\\N\t\\N\t\\N\t\\N\t\\N\n",
                "9\t\\N\txx\t\\N\t\\N\t\\N\t\\N\n"]:
        for conn in both:
            with pytest.raises(psycopg.Error) as e:
                with conn.cursor().copy("COPY cp FROM STDIN") as copy:
                    copy.write(bad)
            assert "2024-02-30" in str(e.value) or '"xx"' in str(e.value)
    assert rows(td, "SELECT count(*) FROM cp") == [(len(TEXTS),)]


@pytest.mark.parametrize("expr", [
    "tz AT TIME ZONE 'UTC'", "tz AT TIME ZONE 'Asia/Kolkata'", "ts AT TIME ZONE 'UTC'",
    "ts AT TIME ZONE 'Europe/Paris'", "tz AT TIME ZONE '+05'", "tz AT TIME ZONE 'utc'",
    "timezone('America/Chicago', tz)", "d AT TIME ZONE 'UTC'",
    "date_trunc('day', tz AT TIME ZONE 'Asia/Tokyo')", "(ts AT TIME ZONE 'UTC')::text",
    "pg_typeof(tz AT TIME ZONE 'UTC')", "pg_typeof(ts AT TIME ZONE 'UTC')",
])
def test_at_time_zone_converts_as_postgresql_converts(both, expr):
    """`AT TIME ZONE` (`textin/atzone.rs`): a TIMESTAMPTZ becomes the wall-clock TIMESTAMP
    in the zone (it stayed the same instant), a TIMESTAMP the TIMESTAMPTZ it names there;
    POSIX offsets count west, as in PostgreSQL."""
    pg, td = both
    filled(both, "atz")
    sql = f"SELECT k, {expr} AS x FROM atz ORDER BY k"
    assert rows(td, sql) == rows(pg, sql)


def test_at_time_zone_groups_by_day_in_the_zone(both):
    """A report by day in a zone, the query AT TIME ZONE answered wrongly before."""
    pg, td = both
    filled(both, "atg")
    sql = ("SELECT (tz AT TIME ZONE 'Asia/Tokyo')::date AS day, count(*) FROM atg "
           "GROUP BY 1 ORDER BY 1")
    assert rows(td, sql) == rows(pg, sql)
    assert sqlstates(both, "SELECT now() AT TIME ZONE 'Mars/Olympus'") == ["22023", "22023"]
