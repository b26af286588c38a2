package canal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A CommitFinder answers, for the end of each transaction of a file of
// several MiB, the commit time the binlog has (set here by SET timestamp,
// one second apart); for the end of an event inside a transaction, and past
// the file's end, that no transaction ends there. An InnoDB transaction
// (ending with an XID event) is answered by reading that one event; a
// MyISAM one (ending with a COMMIT query) by reading the file, and a find
// later in the file than an earlier one's end starts from a transaction
// boundary it remembered, not from the file's start.
func TestCommitFinderReadsTheCommitTimeOfTheTransactionEndingAtAPosition(t *testing.T) {
	for _, engine := range []string{"InnoDB", "MyISAM"} {
		t.Run(engine, func(t *testing.T) { testCommitFinder(t, engine) })
	}
}

func testCommitFinder(t *testing.T, engine string) {
	ctx := context.Background()
	name := srv.NewDatabase(t)
	db := srv.DB(t, name)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB) ENGINE="+engine); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	type end struct {
		file string
		pos  uint32
		at   time.Time
	}
	base := time.Unix(1_600_000_000, 0).UTC()
	var ends []end
	for i := range 40 {
		at := base.Add(time.Duration(i) * time.Second)
		if _, err := conn.ExecContext(ctx, "SET timestamp = ?", at.Unix()); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO big VALUES (?, REPEAT('x', 100000))", i); err != nil {
			t.Fatal(err)
		}
		e := end{at: at}
		var doDB, ignoreDB any
		if err := conn.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&e.file, &e.pos, &doDB, &ignoreDB); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, e)
	}
	if ends[0].file != ends[39].file {
		t.Fatalf("the inserts span %s to %s: the test needs one file", ends[0].file, ends[39].file)
	}
	file := ends[0].file
	size := int64(ends[39].pos)

	f := canal.NewCommitFinder(canal.ScanConfig{Host: "127.0.0.1", Port: uint16(srv.Port), User: "root",
		ServerID: testserver.ServerID() + 900, Flavor: "mariadb"})
	for _, i := range []int{39, 20, 5, 30, 20} {
		at, ok, err := f.CommitAt(ctx, file, ends[i].pos, size)
		if err != nil || !ok || !at.Equal(ends[i].at) {
			t.Errorf("CommitAt(%s:%d) = %v, %v, %v; want %v (insert %d)", file, ends[i].pos, at, ok, err, ends[i].at, i)
		}
	}
	xid, read := canal.Reads(f)
	switch engine {
	case "InnoDB":
		if xid != 4 || read != 0 {
			t.Errorf("4 finds: %d answered by one XID event, %d by reading the file; want all by their XID event", xid, read)
		}
	default:
		if xid != 0 || read != 4 {
			t.Errorf("4 finds: %d answered by one XID event, %d by reading the file; want all by reading the file", xid, read)
		}
		if m := canal.Marks(f, file); len(m) < 2 || m[0] >= ends[20].pos {
			t.Errorf("the finder remembered %v of %s: want boundaries every MiB, some before insert 20's end %d", m, file, ends[20].pos)
		}
	}
	// Inside insert 21: the end of its first event (GTID), where no
	// transaction ends.
	var inside uint32
	rows, err := conn.QueryContext(ctx, fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d", file, ends[20].pos))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() && inside == 0 {
		var log, typ, info string
		var pos, serverID, endPos uint32
		if err := rows.Scan(&log, &pos, &typ, &serverID, &endPos, &info); err != nil {
			t.Fatal(err)
		}
		inside = endPos
	}
	rows.Close()
	if inside <= ends[20].pos {
		t.Fatalf("no event after %s:%d", file, ends[20].pos)
	}
	if at, ok, err := f.CommitAt(ctx, file, inside, size); err != nil || ok {
		t.Errorf("CommitAt(%s:%d), inside a transaction = %v, %v, %v; want none", file, inside, at, ok, err)
	}
	if at, ok, err := f.CommitAt(ctx, file, uint32(size)+100, size); err != nil || ok {
		t.Errorf("CommitAt past the file's end = %v, %v, %v; want none", at, ok, err)
	}
}
