// What a Go application using pgx (v5) does against a PostgreSQL server, one line per
// step: its name, then the Go values and types pgx scanned, the RowDescription fields it
// read, or the SQLSTATE of an error. pgx asks for binary results and sends binary
// parameters for the types it knows, in the extended protocol with its statement cache;
// the "simple protocol" steps use text. python/tests/test_clients.py runs it against
// tierdb and PostgreSQL 15 (TZ=America/New_York) and compares the lines.
//
//	go run . 'postgres://user:password@host:port/db'
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

var tableOID uint32

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case time.Time:
		return fmt.Sprintf("time(%s)", x.UTC().Format(time.RFC3339Nano))
	case []byte:
		return fmt.Sprintf("bytes(%x)", x)
	case pgtype.Numeric:
		b, _ := x.MarshalJSON()
		return fmt.Sprintf("numeric(%s exp=%d)", b, x.Exp)
	case [16]byte:
		return fmt.Sprintf("uuid(%x)", x)
	case pgtype.Time:
		return fmt.Sprintf("time-of-day(%d)", x.Microseconds)
	default:
		return fmt.Sprintf("%T(%v)", v, v)
	}
}

func fields(fds []pgconn.FieldDescription) string {
	out := []string{}
	for _, f := range fds {
		table := fmt.Sprint(f.TableOID)
		if f.TableOID == tableOID && tableOID != 0 {
			table = "table"
		}
		out = append(out, fmt.Sprintf("%s/%d/%d/%s/%d/%d", f.Name, f.DataTypeOID, f.TypeModifier, table, f.TableAttributeNumber, f.Format))
	}
	return strings.Join(out, " ")
}

func rows(r pgx.Rows) (string, error) {
	defer r.Close()
	out := []string{}
	for r.Next() {
		vals, err := r.Values()
		if err != nil {
			return "", err
		}
		cells := []string{}
		for _, v := range vals {
			cells = append(cells, show(v))
		}
		out = append(out, strings.Join(cells, ","))
	}
	return fields(r.FieldDescriptions()) + " | " + strings.Join(out, " ; "), r.Err()
}

func step(name string, f func() (string, error)) {
	s, err := f()
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			fmt.Printf("%s: ERROR %s %s\n", name, pe.Code, pe.ConstraintName)
		} else {
			fmt.Printf("%s: ERROR %v\n", name, err)
		}
		return
	}
	fmt.Printf("%s: %s\n", name, s)
}

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_catalog.pg_class WHERE relname = 'cl_t'").Scan(&tableOID); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	query := func(sql string, args ...any) func() (string, error) {
		return func() (string, error) {
			r, err := conn.Query(ctx, sql, args...)
			if err != nil {
				return "", err
			}
			return rows(r)
		}
	}
	exec := func(sql string, args ...any) func() (string, error) {
		return func() (string, error) {
			tag, err := conn.Exec(ctx, sql, args...)
			return tag.String(), err
		}
	}

	step("select 1", query("SELECT 1 AS one, 30000000000::float8 AS f, 9223372036854775807 AS big, true AS t, NULL::int AS nothing"))
	step("select 1 (simple protocol)", query("SELECT 1 AS one, 1.5 AS num, 30000000000::float8 AS f, 'x' AS lit", pgx.QueryExecModeSimpleProtocol))
	step("now()", func() (string, error) {
		var t time.Time
		var oid uint32
		r, err := conn.Query(ctx, "SELECT now()")
		if err != nil {
			return "", err
		}
		for r.Next() {
			oid = r.FieldDescriptions()[0].DataTypeOID
			if err := r.Scan(&t); err != nil {
				return "", err
			}
		}
		r.Close()
		return fmt.Sprintf("oid=%d near=%v", oid, time.Since(t).Abs() < time.Hour), r.Err()
	})
	ts := time.Date(2024, 5, 17, 10, 0, 0, 123456000, time.UTC)
	wall := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	var num pgtype.Numeric
	_ = num.Scan("0.01")
	var neg pgtype.Numeric
	_ = neg.Scan("-0.05")
	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	ins := "INSERT INTO cl_t (id, v, n, ts, b, j, u, d, f, s, big, tm, wall) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
	step("insert with binary parameters", exec(ins, int32(1), "hello", num, ts, []byte{0, 1, 255},
		map[string]any{"a": []any{1, 2.5}, "b": "x"}, u, time.Date(2024, 5, 17, 0, 0, 0, 0, time.UTC),
		30000000000.0, int16(7), int64(9007199254740993), pgtype.Time{Microseconds: 36672000000, Valid: true}, wall))
	step("insert with text parameters (simple protocol)", exec(ins, pgx.QueryExecModeSimpleProtocol, int32(2), "world", neg,
		time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), []byte{}, `[1, "two"]`, nil,
		time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), 0.1, int16(-32768), int64(-9223372036854775808), nil, nil))
	step("insert nulls", exec("INSERT INTO cl_t (id, v, n) VALUES ($1, $2, $3)", int32(3), "zero", "0.00"))
	step("select the rows (binary results)", query("SELECT * FROM cl_t WHERE id > $1 ORDER BY id", 0))
	step("select the rows (simple protocol)", query("SELECT id, v, n, ts, b, j, u, d, f, s, big, tm, wall FROM cl_t ORDER BY id", pgx.QueryExecModeSimpleProtocol))
	step("numeric parameters", func() (string, error) {
		out := []string{}
		for _, x := range []string{"0.00", "0.01", "-0.05", "12345678.99"} {
			var n pgtype.Numeric
			_ = n.Scan(x)
			var s string
			if err := conn.QueryRow(ctx, "SELECT $1::numeric(10,2)::text", n).Scan(&s); err != nil {
				return "", err
			}
			out = append(out, s)
		}
		return strings.Join(out, ","), nil
	})
	step("a timestamptz parameter compared", query("SELECT id FROM cl_t WHERE ts = $1", ts))
	step("a uuid parameter compared", query("SELECT id FROM cl_t WHERE u = $1", u))
	step("duplicate key", exec("INSERT INTO cl_t (id, v) VALUES (1, 'again')"))
	step("not null", exec("INSERT INTO cl_t (id, v) VALUES (9, NULL)"))
	step("too long for varchar(20)", exec("INSERT INTO cl_t (id, v) VALUES (9, $1)", strings.Repeat("x", 21)))
	step("division by zero", exec("SELECT 1 / 0"))
	step("a transaction rolled back", func() (string, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return "", err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO cl_t (id, v) VALUES (10, 'gone')"); err != nil {
			return "", err
		}
		var inside, after int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM cl_t").Scan(&inside); err != nil {
			return "", err
		}
		if err := tx.Rollback(ctx); err != nil {
			return "", err
		}
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM cl_t").Scan(&after); err != nil {
			return "", err
		}
		return fmt.Sprintf("inside=%d after=%d", inside, after), nil
	})
	step("a batch", func() (string, error) {
		b := &pgx.Batch{}
		b.Queue("UPDATE cl_t SET v = v || '!' WHERE id IN (SELECT id FROM cl_t WHERE id >= $1)", 2)
		b.Queue("DELETE FROM cl_t WHERE id = $1", 3)
		b.Queue("SELECT v FROM cl_t ORDER BY id")
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		out := []string{}
		for i := 0; i < 2; i++ {
			tag, err := br.Exec()
			if err != nil {
				return "", err
			}
			out = append(out, tag.String())
		}
		r, err := br.Query()
		if err != nil {
			return "", err
		}
		s, err := rows(r)
		return strings.Join(append(out, s), " / "), err
	})
	step("copy from", func() (string, error) {
		n, err := conn.CopyFrom(ctx, pgx.Identifier{"cl_t"}, []string{"id", "v", "ts"},
			pgx.CopyFromRows([][]any{{int32(20), "copied", ts}, {int32(21), "copied too", nil}}))
		if err != nil {
			return "", err
		}
		var got int64
		err = conn.QueryRow(ctx, "SELECT count(*) FROM cl_t WHERE ts = $1 OR v = 'copied too'", ts).Scan(&got)
		return fmt.Sprintf("copied=%d found=%d", n, got), err
	})
}
