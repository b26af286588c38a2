package deadletter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

func exercise(t *testing.T, st deadletter.Store) {
	ctx := context.Background()
	for i := range 3 {
		name := "kafka"
		if i == 2 {
			name = "hooks/a"
		}
		err := st.Put(ctx, deadletter.Letter{Sink: name, Reason: fmt.Sprintf("reason %d", i), Attempts: i + 1,
			First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: fmt.Sprintf("e%d", i), AggregateID: "a", Payload: []byte(`{"x": 1}`), Headers: []event.Header{{Key: "k", Value: "v"}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.List(ctx, deadletter.Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List = %d records, %v", len(all), err)
	}
	if all[0].Event.ID != "e0" || string(all[0].Event.Payload) != `{"x": 1}` || all[0].Event.Headers[0].Value != "v" || all[0].Reason != "reason 0" {
		t.Fatalf("record did not round-trip: %+v %+v", all[0], all[0].Event)
	}
	hooks, _ := st.List(ctx, deadletter.Filter{Sink: "hooks/a"})
	if len(hooks) != 1 || hooks[0].Event.ID != "e2" {
		t.Fatalf("sink filter: %+v", hooks)
	}
	// A webhook sink's name selects every endpoint's records; a sink whose
	// name merely starts the same does not match.
	for name, want := range map[string]int{"hooks": 1, "hook": 0, "kafka": 2, "kafk": 0} {
		if got, _ := st.List(ctx, deadletter.Filter{Sink: name}); len(got) != want {
			t.Errorf("sink filter %q selects %d records, want %d", name, len(got), want)
		}
	}
	future, _ := st.List(ctx, deadletter.Filter{Since: time.Now().Add(time.Hour)})
	if len(future) != 0 {
		t.Fatalf("since filter kept %d", len(future))
	}
	if err := st.Delete(ctx, all[0].ID, all[1].ID); err != nil {
		t.Fatal(err)
	}
	left, _ := st.List(ctx, deadletter.Filter{})
	if len(left) != 1 || left[0].ID != all[2].ID {
		t.Fatalf("after delete: %+v", left)
	}
}

func TestFileStore(t *testing.T) {
	st, err := deadletter.OpenFile(t.TempDir() + "/dl")
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, st)
}

func TestMySQLStore(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	st, err := deadletter.OpenMySQL(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, st)
}
