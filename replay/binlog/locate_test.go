package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/replay/binlog"
	"github.com/outbox-relay/outbox-relay/source"
)

// The binlog of a private server holds sixteen files of outbox
// transactions, committed (SET TIMESTAMP) at base+100f+0..4 seconds for
// file f; file 3 and the last have no transaction at all. Each time is found in the right file, at the
// right transaction, by reading a handful of files, not all of them; a
// time before the oldest file is its start while nothing was purged, and
// ErrPurged naming --source table once it was.
func TestLocateFindsTheFileAndTransactionOfATime(t *testing.T) {
	s := testserver.Start(t, testserver.Options{ServerID: 1})
	dbname := s.NewDatabase(t)
	db := s.DB(t, dbname)
	for _, q := range strings.Split(outboxtest.Schema, ";") {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	// After the schema's transactions (committed now): commit times are in
	// binlog order.
	base := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
	for f := range 16 {
		if f != 3 { // file 3 holds no transaction
			for k := range 5 {
				at := base.Add(time.Duration(100*f+k) * time.Second)
				if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET TIMESTAMP = %d", at.Unix())); err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("e%d-%d", f, k)
				if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'a', 'x', 't', '{}')", id); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := conn.ExecContext(ctx, "SET TIMESTAMP = DEFAULT"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
			t.Fatal(err)
		}
	}
	files, err := source.BinaryLogs(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	scan := canal.ScanConfig{Host: "127.0.0.1", Port: uint16(s.Port), User: "root", ServerID: testserver.ServerID(), Flavor: info.Flavor}
	// firstEvent reads the binlog from pos and returns the id of the first
	// outbox event.
	firstEvent := func(t *testing.T, pos event.Position) string {
		t.Helper()
		r, err := canal.New(canal.Config{Host: "127.0.0.1", Port: uint16(s.Port), User: "root", ServerID: testserver.ServerID(), Flavor: info.Flavor, GTIDMode: true,
			Tables: []canal.Table{{Schema: dbname, Name: "outbox", Columns: canal.Columns{ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var id string
		errFound := errors.New("found")
		err = r.Run(rctx, pos, func(_ context.Context, txn *event.Txn) error {
			if len(txn.Events) == 0 {
				return nil
			}
			id = txn.Events[0].ID
			return errFound
		})
		if !errors.Is(err, errFound) {
			t.Fatalf("read from %s: %v", pos, err)
		}
		return id
	}
	for _, c := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"a time of a transaction in the middle", base.Add(202 * time.Second), "e2-2"},
		{"a time between two transactions of one file", base.Add(101500 * time.Millisecond), "e1-1"}, // e1-1 committed within 101s: maybe after 101.5s
		{"the first transaction of a file", base.Add(400 * time.Second), "e4-0"},
		{"a time between files", base.Add(250 * time.Second), "e4-0"},
		{"a time in the last file", base.Add(1504 * time.Second), "e15-4"},
		{"a time in the first file", base.Add(3 * time.Second), "e0-3"},
		{"a time in the file after the one without transactions", base.Add(403 * time.Second), "e4-3"},
		{"a time before the first outbox transaction", base.Add(-30 * time.Minute), "e0-0"},
		{"a time before every transaction, nothing purged", base.Add(-3 * time.Hour), "e0-0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &binlog.Locator{DB: db, Info: info, Scan: scan}
			pos, err := l.Locate(ctx, c.at)
			if err != nil {
				t.Fatal(err)
			}
			if got := firstEvent(t, pos); got != c.want {
				t.Fatalf("Locate(%s) = %s, whose first event is %s, want %s", c.at, pos, got, c.want)
			}
			// A binary search of 18 files: 5 probes, a step back over
			// the file without transactions, 2 files read forward.
			if l.Scanned > 9 {
				t.Fatalf("read %d binary logs of %d: the search reads a few, not all", l.Scanned, len(files))
			}
			t.Logf("%s: %s, %d of %d files read", c.at.Format(time.TimeOnly), pos, l.Scanned, len(files))
		})
	}

	// A time after every transaction is the end of the binlog: nothing to replay.
	l := &binlog.Locator{DB: db, Info: info, Scan: scan}
	end, err := l.Locate(ctx, base.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	if end.GTIDSet != cur.GTIDSet {
		t.Fatalf("Locate(after everything) = %s, want the current position %s", end, cur)
	}

	// Purged: the oldest file left starts at base+200s.
	// A file a binlog dump thread still reads is not purged (the server
	// warns and stops there): the readers above have returned, but their
	// threads on the server may not have ended yet. Purge until it took.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := db.Exec("PURGE BINARY LOGS TO '" + files[3].Name + "'"); err != nil {
			t.Fatal(err)
		}
		left, err := source.BinaryLogs(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if left[0].Name == files[3].Name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PURGE BINARY LOGS TO %s left %s as the oldest", files[3].Name, left[0].Name)
		}
	}
	l = &binlog.Locator{DB: db, Info: info, Scan: scan}
	_, err = l.Locate(ctx, base.Add(150*time.Second))
	if !errors.Is(err, replay.ErrPurged) || !strings.Contains(err.Error(), "--source table") {
		t.Fatalf("Locate before the oldest binary log = %v, want ErrPurged naming --source table", err)
	}
	pos, err := l.Locate(ctx, base.Add(401*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := firstEvent(t, pos); got != "e4-1" {
		t.Fatalf("after the purge, Locate(+401s) starts at %s, want e4-1", got)
	}
}
