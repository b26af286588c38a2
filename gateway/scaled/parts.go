package scaled

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Parts are the finished values a replica runs with, so that it runs as the
// relay's own: assembled and started once by the relay before Run (package
// relay's Relay.RunGateway), and stopped by it after Run returned. The
// gateway calls nothing of the assembly to build or start them.
type Parts struct {
	Logger *slog.Logger
	// Retry is the relay's one retry policy.
	Retry retry.Policy
	// Health is the webhook endpoints' health.
	Health *gateway.Health
	// Metrics are the relay's metrics, registered and, when http.listen
	// is set, served as the relay serves them.
	Metrics  *metrics.Metrics
	Gateways *gateway.Metrics // the fan-out sinks' metrics, on Metrics
	// Endpoints are what the webhook sink's endpoints are built with, as
	// the relay builds them (its health, retry policy, logger, metrics and
	// open attempts record); Run sets a partition's Suffix, Store and
	// Slots on a copy.
	Endpoints gateway.FanOutParams
	// DeadLetters is the configured dead-letter store, open for writing
	// (nil when none is configured).
	DeadLetters deadletter.Putter
	// Targets are what the replay jobs send to.
	Targets Targets
}

// Targets build what a replay job sends to, as the relay would: package
// relay's Relay is one. A job arrives while the replica runs, so its sink
// is built then, from the configuration of its endpoint or of the
// endpoints table's row read then.
type Targets interface {
	// ReplayTarget builds the sink a replay job sends to (a fresh one,
	// from the configuration of its endpoint, of the configuration or of
	// the endpoints table read from db; db nil: the configuration's
	// only) and the endpoint's filter (nil: every event). An unknown
	// endpoint is an error that says what to give.
	ReplayTarget(ctx context.Context, db *sql.DB, j replay.Job) (sink.Sink, func(*event.Event) bool, error)
	// ReplayTargetVersion is the version of a job's endpoint now, for
	// replay.Runner.Current (a digest of its row; "" for an endpoint of
	// the configuration); an endpoint gone wraps replay.ErrTargetGone.
	ReplayTargetVersion(ctx context.Context, db *sql.DB, j replay.Job) (string, error)
}
