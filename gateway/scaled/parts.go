package scaled

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Assembly is what a replica, and the planning of its replays, use of the
// relay's assembly: package relay's Relay is one, and the only one a
// command hands in. The gateway owns this contract and imports no
// assembly; the assembly builds the parts, once (Start).
type Assembly interface {
	// Config is the relay's configuration: the webhook and Kafka sinks,
	// the source (for the endpoints table), checkpoint.dsn, delivery and
	// replay settings.
	Config() *config.Config
	// Start registers the relay's metrics and, when http.listen is set,
	// serves them as the relay does, until stop is called; Parts report
	// to them.
	Start() (p *Parts, stop func(), err error)
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

// Parts are what the relay shares with a replica so that it runs as the
// relay's own: its metrics, served as the relay serves them, its webhook
// endpoints' health, its one retry policy, its logger and its dead
// letters, assembled by the relay (Assembly.Start).
type Parts struct {
	Logger   *slog.Logger
	Retry    retry.Policy
	Health   *gateway.Health
	Metrics  *metrics.Metrics
	Gateways *gateway.Metrics // the fan-out sinks' metrics, on Metrics
	// FanOutParams are what a fan-out kind builds the endpoints of sink s
	// with, as the relay builds them (suffix and slots:
	// gateway.FanOutParams).
	FanOutParams func(s config.Sink, suffix string, store checkpoint.Store, slots chan struct{}) gateway.FanOutParams
	// OpenAttempts opens the attempts record (attempts.enabled), which the
	// endpoints FanOutParams builds report to, with its metrics; close
	// stores what is queued. Call it once the replica may deliver, and
	// close it after its endpoints stopped.
	OpenAttempts func(ctx context.Context) (close func(), err error)
	// OpenDeadLetters opens the configured dead-letter store for writing
	// (nil when none is configured).
	OpenDeadLetters func(ctx context.Context) (deadletter.Putter, func(), error)
}
