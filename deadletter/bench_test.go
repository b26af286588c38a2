package deadletter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A tenant's List of a file store holding 2,000 records of 100 tenants
// (2 KB payloads) reads its own 20 files; the operator's reads all of
// them, as every tenant's did before records kept their tenant.
func BenchmarkFileList(b *testing.B) {
	st, err := deadletter.OpenFile(b.TempDir() + "/dl")
	if err != nil {
		b.Fatal(err)
	}
	benchList(b, st)
}

// The same in the MySQL store: a tenant's List reads its 20 rows by the
// index ix_tenant.
func BenchmarkMySQLList(b *testing.B) {
	srv := testserver.Start(b, testserver.Options{NoBinlog: true})
	st, err := deadletter.OpenMySQL(context.Background(), srv.DB(b, srv.NewDatabase(b)), "")
	if err != nil {
		b.Fatal(err)
	}
	benchList(b, st)
}

func benchList(b *testing.B, st deadletter.Store) {
	payload := []byte(`{"x": "` + strings.Repeat("p", 2048) + `"}`)
	for i := range 2000 {
		err := st.Put(context.Background(), deadletter.Letter{Sink: "hooks/e", Tenant: fmt.Sprintf("tenant-%d", i%100), Reason: "400",
			First: time.Now(), Last: time.Now(), Event: &event.Event{ID: fmt.Sprint(i), AggregateID: "a", Payload: payload}})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    deadletter.Filter
		want int
	}{{"one tenant", deadletter.Filter{Tenant: "tenant-7"}, 20}, {"every record", deadletter.Filter{}, 2000}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				recs, err := st.List(context.Background(), c.f)
				if err != nil || len(recs) != c.want {
					b.Fatalf("List = %d records, %v", len(recs), err)
				}
			}
		})
	}
}
