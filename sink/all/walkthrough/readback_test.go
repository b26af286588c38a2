package walkthrough_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/audittest"
)

// The second toy kind, "toylog", has what the first lacks: a server its
// tests need (declared, as CI reads it: sink.Kind.Server), a read-back for
// `outbox-relay audit` (sink.Kind.Audit) and an audit flag of its own
// (sink.Kind.AuditFlags). Its server is a listener of this process that its
// sinks dial at Connect; the messages it "stores" are kept in this
// process, by store name.

// toyServer is toylog's server, started when the kind is registered.
var toyServer net.Listener

// toyStores are the stores of the toy server, by name.
var toyStores sync.Map // string → *toyStore

type toyStore struct {
	mu   sync.Mutex
	msgs []toyMsg
}

type toyMsg struct {
	dest, id, gtid string
	at             time.Time
	deleted        bool
}

func storeNamed(name string) *toyStore {
	s, _ := toyStores.LoadOrStore(name, &toyStore{})
	return s.(*toyStore)
}

// toylogConfig is the toylog section.
type toylogConfig struct {
	// Store is the toy server's store the sink appends to. Default "main".
	Store string `yaml:"store"`
}

func (c *toylogConfig) Defaults() {
	if c.Store == "" {
		c.Store = "main"
	}
}

func (c *toylogConfig) Validate() error { return nil }

// toylogSink appends each event to its store, under "toylog:<aggregate type>".
type toylogSink struct{ store string }

func (s *toylogSink) Connect(context.Context) error {
	c, err := net.Dial("tcp", toyServer.Addr().String())
	if err != nil {
		return fmt.Errorf("toylog: %w", err)
	}
	return c.Close()
}
func (s *toylogSink) Close(context.Context) error { return nil }
func (s *toylogSink) Write(_ context.Context, batch []*event.Event) error {
	st := storeNamed(s.store)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range batch {
		st.msgs = append(st.msgs, toyMsg{dest: toyDest(e), id: e.ID, gtid: e.Source.GTID, at: time.Now()})
	}
	return nil
}

func toyDest(e *event.Event) string { return "toylog:" + e.AggregateType }

// toyAuditor reads a store back, for the audit.
type toyAuditor struct{ store string }

func (a *toyAuditor) Dest(e *event.Event) (string, error) { return toyDest(e), nil }
func (a *toyAuditor) Close() error                        { return nil }
func (a *toyAuditor) ReadBack(_ context.Context, from time.Time, dests []string, each func(sink.Stored) error) error {
	st := storeNamed(a.store)
	st.mu.Lock()
	msgs := slices.Clone(st.msgs)
	st.mu.Unlock()
	for _, d := range dests {
		for i, m := range msgs {
			if m.dest != d || m.deleted || m.at.Before(from) {
				continue
			}
			if err := each(sink.Stored{ID: m.id, GTID: m.gtid, Time: m.at, Log: d, Offset: int64(i)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func init() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	toyServer = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	sink.Register(sink.Kind{
		Type:   "toylog",
		Config: func() config.SinkConfig { return new(toylogConfig) },
		New: func(p sink.Params) (sink.Sink, error) {
			return &toylogSink{store: p.Config.(*toylogConfig).Store}, nil
		},
		Audit: func(p sink.AuditParams) (sink.Auditor, error) {
			store := p.Flags["toylog-store"]
			if store == "" {
				return nil, errors.New("toylog: give --toylog-store, the store to read back")
			}
			return &toyAuditor{store: store}, nil
		},
		AuditFlags: []sink.AuditFlag{{Name: "toylog-store", Value: "NAME", Usage: "toylog: the store to read back"}},
		Server: &sink.Server{Name: "toylog-server", Addr: l.Addr().String(), Packages: []string{"toylog-server"},
			Start: "toylog-server --background"},
	})
}

// TestAuditToylogFindsExactlyTheDeletedMessages is the toy kind's audit
// test, in its own package as docs/adding-a-sink.md says: its server is
// the one it declares, the audit's story is audittest.Stream's (a relay on
// a private MariaDB, an audit healthy, deleted messages found missing),
// and its audit flag reaches its Auditor. No file outside this one names
// the kind.
func TestAuditToylogFindsExactlyTheDeletedMessages(t *testing.T) {
	sinktest.RequireServer(t, "toylog")
	store := "s" + sinktest.Unique()
	audittest.Stream(t, fmt.Sprintf("  - {name: log, type: toylog, toylog: {store: %s}}\n", store),
		map[string]string{"toylog-store": store}, func() ([]string, func(int)) {
			st := storeNamed(store)
			st.mu.Lock()
			defer st.mu.Unlock()
			var ids []string
			var at []int
			for i, m := range st.msgs {
				if !m.deleted {
					ids, at = append(ids, m.id), append(at, i)
				}
			}
			return ids, func(i int) {
				st.mu.Lock()
				defer st.mu.Unlock()
				st.msgs[at[i]].deleted = true
			}
		})
	if k, _ := sink.KindOf("toylog"); !strings.HasPrefix(k.Server.Addr, "127.0.0.1:") {
		t.Errorf("the toy's server is declared at %s", k.Server.Addr)
	}
}
