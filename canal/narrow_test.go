package canal_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
)

// wideColumns are columns of every type a row image can hold, between the
// outbox columns of wideDDL: each with a generator of its SQL literal.
var wideColumns = []struct {
	name, def string
	val       func(r *rand.Rand) string
}{
	{"c_tiny", "TINYINT NULL", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(256) - 128) }},
	{"c_utiny", "TINYINT UNSIGNED NULL", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(256)) }},
	{"c_short", "SMALLINT NULL", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(65536) - 32768) }},
	{"c_ushort", "SMALLINT UNSIGNED NULL", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(65536)) }},
	{"c_medium", "MEDIUMINT NULL", func(r *rand.Rand) string { return fmt.Sprint(r.IntN(1<<24) - 1<<23) }},
	{"c_int", "INT NULL", func(r *rand.Rand) string { return fmt.Sprint(r.Int32() - 1<<30) }},
	{"c_ubig", "BIGINT UNSIGNED NULL", func(r *rand.Rand) string { return fmt.Sprint(r.Uint64()) }},
	{"c_dec", "DECIMAL(10,3) NULL", func(r *rand.Rand) string { return fmt.Sprintf("%d.%03d", r.IntN(2000000)-1000000, r.IntN(1000)) }},
	{"c_bigdec", "DECIMAL(40,12) NULL", func(r *rand.Rand) string { return fmt.Sprintf("-%d%d.%d", r.Uint64(), r.IntN(1000), r.IntN(1e9)) }},
	{"c_float", "FLOAT NULL", func(r *rand.Rand) string { return fmt.Sprint(float32(r.NormFloat64())) }},
	{"c_double", "DOUBLE NULL", func(r *rand.Rand) string { return fmt.Sprint(r.NormFloat64() * 1e6) }},
	{"c_bit", "BIT(13) NULL", func(r *rand.Rand) string { return fmt.Sprintf("b'%b'", r.IntN(1<<13)) }},
	{"c_date", "DATE NULL", func(r *rand.Rand) string {
		return fmt.Sprintf("'20%02d-%02d-%02d'", r.IntN(99), 1+r.IntN(12), 1+r.IntN(28))
	}},
	{"c_time", "TIME(3) NULL", func(r *rand.Rand) string {
		return fmt.Sprintf("'%02d:%02d:%02d.%03d'", r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000))
	}},
	{"c_dt", "DATETIME(6) NULL", func(r *rand.Rand) string {
		return fmt.Sprintf("'2024-%02d-%02d 01:02:03.%06d'", 1+r.IntN(12), 1+r.IntN(28), r.IntN(1e6))
	}},
	{"c_dt0", "DATETIME NULL", func(r *rand.Rand) string { return fmt.Sprintf("'2023-01-%02d 10:11:12'", 1+r.IntN(28)) }},
	{"c_ts", "TIMESTAMP(2) NULL", func(r *rand.Rand) string { return fmt.Sprintf("'2022-03-04 05:06:%02d.%02d'", r.IntN(60), r.IntN(100)) }},
	{"c_year", "YEAR NULL", func(r *rand.Rand) string { return fmt.Sprint(1901 + r.IntN(254)) }},
	{"c_char", "CHAR(10) NULL", func(r *rand.Rand) string { return fmt.Sprintf("'ch%d'", r.IntN(1e6)) }},
	{"c_bin", "BINARY(5) NULL", func(r *rand.Rand) string { return fmt.Sprintf("UNHEX('%010x')", r.Uint64()>>24) }},
	{"c_wide", "VARCHAR(300) NULL", func(r *rand.Rand) string { return "'" + strings.Repeat("w", r.IntN(300)) + "'" }},
	{"c_widechar", "CHAR(255) CHARACTER SET utf8mb4 NULL", func(r *rand.Rand) string { return "'" + strings.Repeat("é", r.IntN(255)) + "'" }},
	{"c_varbin", "VARBINARY(10) NULL", func(r *rand.Rand) string { return fmt.Sprintf("UNHEX('%08x')", r.Uint32()) }},
	{"c_enum", "ENUM('a','b','c') NULL", func(r *rand.Rand) string { return fmt.Sprintf("'%c'", 'a'+r.IntN(3)) }},
	{"c_set", "SET('x','y','z') NULL", func(r *rand.Rand) string { return []string{"''", "'x'", "'x,z'", "'y,z'"}[r.IntN(4)] }},
	{"c_tinyblob", "TINYBLOB NULL", func(r *rand.Rand) string { return fmt.Sprintf("'tb%d'", r.IntN(1e6)) }},
	{"c_text", "TEXT NULL", func(r *rand.Rand) string { return "'" + strings.Repeat("t", r.IntN(1000)) + "'" }},
	{"c_medblob", "MEDIUMBLOB NULL", func(r *rand.Rand) string { return "'" + strings.Repeat("m", r.IntN(70000)) + "'" }},
	{"c_json", "JSON NULL", func(r *rand.Rand) string { return fmt.Sprintf(`'{"n": %d}'`, r.IntN(1e6)) }},
}

// Narrow decoding (only the columns an event is made of, the others
// stepped over) gives the events that decoding every column gives, for rows
// holding every type of column, NULL or not, whichever of them are mapped
// to headers and whichever are stepped over; and the rows were decoded
// narrow.
func TestNarrowRowsGiveTheEventsOfWholeRows(t *testing.T) {
	dbname, db, cfg := setup(t)
	defs := []string{"id BIGINT UNSIGNED NOT NULL PRIMARY KEY", "aggregatetype VARCHAR(64) NOT NULL"}
	for i, c := range wideColumns {
		defs = append(defs, c.name+" "+c.def)
		switch i {
		case 5:
			defs = append(defs, "aggregateid VARCHAR(64) NOT NULL")
		case 12:
			defs = append(defs, "type CHAR(20) NOT NULL")
		case 20:
			defs = append(defs, "payload LONGTEXT NULL")
		}
	}
	if _, err := db.Exec("CREATE TABLE wide (" + strings.Join(defs, ", ") + ")"); err != nil {
		t.Fatal(err)
	}
	start := serverPosition(t, db, false)
	r := rand.New(rand.NewPCG(1, 32))
	const txns, perTxn = 30, 5
	for k := range txns {
		var rows []string
		for j := range perTxn {
			n := k*perTxn + j
			cols := []string{"id", "aggregatetype", "aggregateid", "type", "payload"}
			vals := []string{fmt.Sprint(n + 1), fmt.Sprintf("'at%d'", n%3), fmt.Sprintf("'ag%d'", n%7), "'ty'", fmt.Sprintf(`'{"n": %d}'`, n)}
			if n%11 == 0 {
				vals[4] = "NULL"
			}
			for _, c := range wideColumns {
				cols = append(cols, c.name)
				if r.IntN(4) == 0 {
					vals = append(vals, "NULL")
				} else {
					vals = append(vals, c.val(r))
				}
			}
			rows = append(rows, "INSERT INTO wide ("+strings.Join(cols, ", ")+") VALUES ("+strings.Join(vals, ", ")+")")
		}
		if _, err := db.Exec("SET time_zone = '+00:00'; BEGIN; " + strings.Join(rows, "; ") + "; COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	// Half the odd columns are headers (decoded), the other half are
	// stepped over; then the other way round; then no header at all.
	var even, odd []string
	for i, c := range wideColumns {
		if i%2 == 0 {
			even = append(even, c.name)
		} else {
			odd = append(odd, c.name)
		}
	}
	for _, headers := range [][]string{even, odd, nil} {
		cfg.Tables = []canal.Table{{Schema: dbname, Name: "wide", Headers: headers, Columns: canal.Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}}
		narrow, n, unknown, direct := readWide(t, cfg, start, txns*perTxn, false)
		whole, _, _, _ := readWide(t, cfg, start, txns*perTxn, true)
		if n == 0 || unknown > 0 {
			t.Fatalf("headers %v: %d rows events decoded narrow, %d whole because a value's length was not known: want every one narrow", headers, n, unknown)
		}
		if (headers == nil) != (direct == n) {
			t.Fatalf("headers %v: %d of %d rows events decoded straight into events; want all without headers, none with", headers, direct, n)
		}
		for i := range whole {
			a, b := narrow[i], whole[i]
			if fmt.Sprintf("%+v %q", *a, a.Payload) != fmt.Sprintf("%+v %q", *b, b.Payload) {
				t.Fatalf("headers %v: event %d decoded narrow:\n%+v\nwhole:\n%+v", headers, i, *a, *b)
			}
		}
		if headers != nil && len(whole[1].Headers) == 0 {
			t.Fatalf("headers %v: event 1 has none", headers)
		}
	}
}

// readWide reads want events from start, decoding rows whole or narrow,
// and returns them with the number of rows events decoded narrow, and of
// those decoded whole because a value's length was not known.
func readWide(t *testing.T, cfg canal.Config, start event.Position, want int, whole bool) ([]*event.Event, int64, int64, int64) {
	t.Helper()
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if whole {
		canal.DecodeWhole(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var evs []*event.Event
	err = r.Run(ctx, start, func(_ context.Context, txn *event.Txn) error {
		evs = append(evs, txn.Events...)
		if len(evs) >= want {
			cancel()
		}
		return nil
	})
	if len(evs) < want {
		t.Fatalf("read %d of %d events: %v", len(evs), want, err)
	}
	n, unknown := canal.Narrowed(r)
	return evs, n, unknown, canal.Direct(r)
}

// Rows decoded straight into events (integer or character ids, character
// columns with one- and two-byte lengths, CHAR, TEXT and BLOB payloads,
// NULL, empty and non-UTF-8 values) give the events of whole rows.
func TestDirectRowsGiveTheEventsOfWholeRows(t *testing.T) {
	tables := []struct{ name, id, idVal string }{
		{"d_int", "INT NOT NULL PRIMARY KEY", "%d - 40"},
		{"d_tiny", "TINYINT UNSIGNED NOT NULL PRIMARY KEY", "%d + 100"},
		{"d_medium", "MEDIUMINT NOT NULL PRIMARY KEY", "-%d * 1000"},
		{"d_ubig", "BIGINT UNSIGNED NOT NULL PRIMARY KEY", "18446744073709551000 + %d"},
		{"d_varchar", "VARCHAR(40) NULL", "IF(%[1]d %% 7 = 0, NULL, CONCAT('id-', %[1]d))"},
		{"d_varbinary", "VARBINARY(40) NULL", "IF(%[1]d %% 5 = 0, UNHEX('FFFE00'), CONCAT('b', %[1]d))"},
	}
	dbname, db, cfg := setup(t)
	start := serverPosition(t, db, false)
	const rows = 40
	for _, tb := range tables {
		ddl := fmt.Sprintf(`CREATE TABLE %s (id %s, pad DATETIME(6) NULL, aggregatetype CHAR(10) NULL,
			aggregateid VARCHAR(300) NOT NULL, type TINYTEXT NULL, payload BLOB NULL, tail ENUM('x','y') NULL)`, tb.name, tb.id)
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
		var stmts []string
		for i := range rows {
			payload := fmt.Sprintf(`'{"n": %d}'`, i)
			switch i % 4 {
			case 1:
				payload = "NULL"
			case 2:
				payload = "''"
			case 3:
				payload = "UNHEX('00FF80')"
			}
			aggType := "'Order'"
			if i%6 == 0 {
				aggType = "NULL"
			}
			stmts = append(stmts, fmt.Sprintf("INSERT INTO %s VALUES (%s, NOW(6), %s, '%s', 't%d', %s, 'y')",
				tb.name, fmt.Sprintf(tb.idVal, i), aggType, strings.Repeat("a", i*7), i, payload))
		}
		if _, err := db.Exec("BEGIN; " + strings.Join(stmts, "; ") + "; COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range tables {
		cfg.Tables = []canal.Table{{Schema: dbname, Name: tb.name, Columns: canal.Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}}
		narrow, n, unknown, direct := readWide(t, cfg, start, rows, false)
		whole, _, _, _ := readWide(t, cfg, start, rows, true)
		if n == 0 || unknown > 0 || direct != n {
			t.Fatalf("%s: %d rows events decoded narrow, %d of them direct, %d whole: want every one direct", tb.name, n, direct, unknown)
		}
		for i := range whole[:rows] {
			a, b := narrow[i], whole[i]
			if fmt.Sprintf("%+v %q %v", *a, a.Payload, a.Payload == nil) != fmt.Sprintf("%+v %q %v", *b, b.Payload, b.Payload == nil) {
				t.Fatalf("%s: event %d decoded direct:\n%+v\nwhole:\n%+v", tb.name, i, *a, *b)
			}
		}
	}
}
