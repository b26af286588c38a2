package webhook

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The webhook kind is a fan-out: the relay runs each webhook sink as a
// gateway (package gateway) of its endpoints, and this package declares,
// through fanOut (its sink.Kind's FanOut), how they are built: those of
// the configuration, and those of its endpoints table, which this package
// follows (follow.go has the rule). Their owner is this package, not the
// relay nor package gateway: the rows, their secrets, the 410 an endpoint
// answers and the filters are the webhook's; the gateway only routes,
// queues and checkpoints whatever endpoints it is given.
var fanOut = gateway.FanOut{Endpoints: staticEndpoints, Table: followTable, Filter: endpointFilter, Admin: admin,
	EncryptSecret: func(key, secret string, row gateway.SecretRow) (string, error) {
		return EncryptSecret(key, secret, SecretRow(row))
	}}

// endpointFilter is the filter of the endpoint of the configuration named
// name: what it selects (nil: every event, or no such endpoint).
func endpointFilter(sc config.SinkConfig, name string) func(*event.Event) bool {
	wc, _ := sc.(*SinkConfig)
	if wc == nil {
		return nil
	}
	for _, e := range wc.Endpoints {
		if e.Name == name {
			return e.Filter.Match
		}
	}
	return nil
}

// section is p's section, a webhook one.
func section(p gateway.FanOutParams) (*SinkConfig, error) {
	wc, ok := p.Config.(*SinkConfig)
	if !ok {
		return nil, fmt.Errorf("webhook: section of sink %q is a %T, not a webhook section", p.Sink, p.Config)
	}
	return wc, nil
}

// staticEndpoints builds the endpoints of the sink's configuration.
func staticEndpoints(p gateway.FanOutParams) ([]gateway.Endpoint, error) {
	wc, err := section(p)
	if err != nil {
		return nil, err
	}
	b := newBuilder(p)
	var out []gateway.Endpoint
	for j, ec := range wc.Endpoints {
		ep, err := b.build(ec)
		if err != nil {
			return nil, fmt.Errorf("webhook.endpoints[%d]: %w", j, err)
		}
		out = append(out, ep)
	}
	return out, nil
}

// followTable returns the follower of the sink's endpoints table, or nil.
func followTable(p gateway.FanOutParams) (gateway.Table, error) {
	wc, err := section(p)
	if err != nil || wc.EndpointsTable == nil {
		return nil, err
	}
	b := newBuilder(p)
	tc := wc.EndpointsTable.WithDefaults()
	tc.Logger = b.p.Logger
	te := newTableEndpoints(p.Sink, tc, wc.Endpoints)
	te.suffix, te.store, te.health, te.b = p.Suffix, p.Store, p.Health, b
	te.states = p.States
	if te.states == nil {
		te.states = noStates{}
	}
	te.log = b.p.Logger.With(slog.String("sink", p.Sink))
	return followed{te}, nil
}

func newBuilder(p gateway.FanOutParams) builder {
	defaults.Logger(&p.Logger)
	return builder{p: p}
}

// builder builds the endpoints of one sink (and partition).
type builder struct {
	p gateway.FanOutParams
}

// build makes the gateway's endpoint of ec, an endpoint of the
// configuration: validated here (a bad one fails the start), its sink
// made by Open with what carried keeps between its sinks.
func (b builder) build(ec EndpointConfig) (gateway.Endpoint, error) {
	if err := ec.Validate(); err != nil {
		return gateway.Endpoint{}, err
	}
	ec = ec.WithDefaults()
	key := b.key(ec.Name)
	carry := &carried{}
	return b.endpoint(key, gatewayFilter(ec.Filter), func() (sink.Sink, error) { return b.open(key, ec, carry) }), nil
}

// key is the gateway's key of the endpoint named name.
func (b builder) key(name string) string { return b.p.Sink + "/" + name + b.p.Suffix }

// endpoint is the gateway's endpoint key, routed by filter, whose sink
// open makes when the gateway wakes it.
func (b builder) endpoint(key string, filter gateway.Filter, open func() (sink.Sink, error)) gateway.Endpoint {
	return gateway.Endpoint{Key: key, Filter: filter, Open: open}
}

// open makes a sink of endpoint key: ec, its defaults applied and valid,
// handed on what carry keeps. Its filter is the gateway's, which routes
// its events and can change at a transaction (endpoints table); the
// webhook endpoint itself filters nothing. Every attempt is told to the
// gateway's Health: a 410 (Gone) disables the endpoint.
func (b builder) open(key string, ec EndpointConfig, carry *carried) (sink.Sink, error) {
	p := b.p
	obs := healthObserver{key: key, health: p.Health}
	if p.Observer != nil {
		obs.Observer, _ = p.Observer(key).(Observer)
	}
	ec.Observer, ec.Policy = obs, p.Retry
	ec.Attempts, ec.Sink = p.Attempts, p.Sink
	if p.Slots != nil {
		ec.Slots = p.Slots
	}
	ec.Filter = Filter{}
	e, err := makeEndpoint(ec, p.Logger.With(slog.String("sink", key)), carry, true)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// followed is a tableEndpoints as a gateway.Table.
type followed struct{ te *tableEndpoints }

func (f followed) Name() string { return f.te.tc.Table }
func (f followed) Load(ctx context.Context, db *sql.DB) ([]gateway.Endpoint, error) {
	return f.te.load(ctx, db)
}
func (f followed) Rows(ctx context.Context, db *sql.DB) ([]map[string]any, error) {
	return f.te.tc.Rows(ctx, db)
}
func (f followed) Row(ctx context.Context, db *sql.DB, id string) (map[string]any, bool, error) {
	return f.te.tc.Row(ctx, db, id)
}
func (f followed) LoadRows(rows []map[string]any) []gateway.Endpoint { return f.te.loadRows(rows) }
func (f followed) Changed(g *gateway.Gateway, txn *event.Txn)        { f.te.changed(g, txn) }

// noStates shows nothing (a caller without metrics).
type noStates struct{}

func (noStates) State(string, gateway.State) {}
func (noStates) Invalid(string, error)       {}
func (noStates) Forget(string)               {}
