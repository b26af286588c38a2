package gateway

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// FanOut is what a fan-out sink kind (its section is a config.FanOut: one
// stream handed to an endpoint per destination) declares for the relay, in
// its sink.Kind's FanOut field: how to build one sink's endpoints, those of
// its configuration and those of its endpoints table. Package sink cannot
// name this type (gateway imports sink); FanOutOf reads it back. The relay
// assembles and runs gateways from it without knowing the kind.
type FanOut struct {
	// Endpoints builds the endpoints of one sink's configuration. It opens
	// no connection.
	Endpoints func(FanOutParams) ([]Endpoint, error)
	// Table returns the follower of one sink's endpoints table, which
	// builds the endpoints of its rows; nil (and no error) when the sink
	// has none. It opens no connection.
	Table func(FanOutParams) (Table, error)
	// Filter returns what the endpoint of the configuration named endpoint
	// selects (nil: every event, or no such endpoint), without building it
	// (`outbox-relay audit` of one endpoint).
	Filter func(sc config.SinkConfig, endpoint string) func(*event.Event) bool
	// EncryptSecret, for a kind whose endpoints table holds encrypted
	// secrets, encrypts secret with key for the secrets column of one row
	// (`outbox-relay endpoints encrypt-secret`): the value decrypts only in
	// that row. Errors never contain the secret or the key. Nil: the kind's
	// table holds none.
	EncryptSecret func(key, secret string, row SecretRow) (string, error)
	// Admin returns the writer of one sink's endpoints table on db (the
	// console's writes); nil (and no error) when the sink has none. Nil:
	// the kind has no table to write.
	Admin func(sink string, sc config.SinkConfig, db *sql.DB) (TableAdmin, error)
}

// SecretRow names the endpoints table's row an encrypted secret is for.
type SecretRow struct {
	// Table is the endpoints table, as the sink's section spells it
	// ("shop.outbox_endpoints").
	Table string
	// ID is the row's id column.
	ID string
	// URL is the row's url column, exactly as stored.
	URL string
}

// SecretKinds returns the fan-out kinds whose endpoints table holds
// encrypted secrets (FanOut.EncryptSecret set), by type.
func SecretKinds() map[string]func(key, secret string, row SecretRow) (string, error) {
	out := map[string]func(key, secret string, row SecretRow) (string, error){}
	for _, k := range sink.Kinds() {
		if fo, ok := FanOutOf(k); ok && fo.EncryptSecret != nil {
			out[k.Type] = fo.EncryptSecret
		}
	}
	return out
}

// FanOutParams is what FanOut's functions get.
type FanOutParams struct {
	// Sink is the sink's name: its endpoints' keys are "<Sink>/<endpoint>"
	// followed by Suffix.
	Sink   string
	Config config.SinkConfig
	// Suffix ends every key: the Kafka-sourced gateway's partition
	// ("@topic[p]"); empty in the relay.
	Suffix string
	// Store holds the endpoints' cursors (a deleted table row's is dropped).
	Store checkpoint.Store
	// Health is told of every attempt; an endpoint the destination says is
	// gone (an HTTP 410) is reported with Health.Gone, and its gateway
	// disables it. Nil: none.
	Health *Health
	// States shows the endpoints that do not run (off, invalid) and forgets
	// deleted ones. Nil: none.
	States StateShower
	// Observer returns the metrics observer of the endpoint keyed key, of
	// the kind's own observer type (nil: none).
	Observer func(key string) any
	// Retry is the relay's retry policy (retry.FromConfig).
	Retry retry.Policy
	// Slots, if set, are request slots shared by every endpoint.
	Slots chan struct{}
	// Attempts, if set, is told about every delivery attempt of every
	// endpoint (the attempts record). Nil: none.
	Attempts attempts.Recorder
	Logger   *slog.Logger
}

// Table follows a fan-out sink's endpoints table. Its methods other than
// Load, Rows, Row and LoadRows are called under the hub's lock, or before the gateway
// runs.
type Table interface {
	// Name is the table, "schema.table": the shared stream reads its row
	// changes and hands them to Changed.
	Name() string
	// Load reads the table and returns the endpoints of its usable,
	// enabled rows; only a table that cannot be read is an error.
	Load(ctx context.Context, db *sql.DB) ([]Endpoint, error)
	// Rows reads the table's rows as they are, for a follower that polls
	// (LoadRows, then Changed with the differences).
	Rows(ctx context.Context, db *sql.DB) ([]map[string]any, error)
	// Row reads the row whose id is id by its primary key, as Rows reads
	// rows: one row read, whatever the size of the table; ok is false
	// when there is none.
	Row(ctx context.Context, db *sql.DB, id string) (row map[string]any, ok bool, err error)
	// LoadRows is Load over rows Rows or Row read.
	LoadRows(rows []map[string]any) []Endpoint
	// Changed applies a transaction's row changes of the table to g: it
	// starts, stops, changes and forgets endpoints, each at that
	// transaction.
	Changed(g *Gateway, txn *event.Txn)
}

// StateShower shows the states of endpoints that do not run and forgets deleted
// ones (the gateway's metrics).
type StateShower interface {
	State(key string, s State)
	Invalid(key string, err error)
	Forget(key string)
}

// FanOutOf returns the fan-out declaration of kind k: ok is false for a kind
// that is not a fan-out (k.FanOut nil). A FanOut field of another type is a
// programming error of the kind's package, and panics.
func FanOutOf(k sink.Kind) (FanOut, bool) {
	if k.FanOut == nil {
		return FanOut{}, false
	}
	f, ok := k.FanOut.(FanOut)
	if !ok {
		panic("gateway: sink kind " + k.Type + " declares a FanOut that is not a gateway.FanOut")
	}
	return f, true
}

// HasTable reports whether sc is a fan-out sink with an endpoints table:
// every checkpoint key under its name may be one of its endpoints'.
func HasTable(sc config.Sink) bool {
	fo, ok := FanOutFor(sc)
	if !ok {
		return false
	}
	t, err := fo.Table(FanOutParams{Sink: sc.Name, Config: sc.Config})
	return err == nil && t != nil
}

// FanOutFor returns the fan-out declaration of the kind of section sc.
func FanOutFor(sc config.Sink) (FanOut, bool) {
	k, ok := sink.KindOf(sc.Type)
	if !ok {
		return FanOut{}, false
	}
	return FanOutOf(k)
}
