package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/gateway/scaled"
	"github.com/outbox-relay/outbox-relay/relay"
)

// gatewayCmd runs one replica of the scaled-out webhook gateway
// (docs/gateway-scale-out.md): its source is the topics a Kafka sink of the
// same configuration writes; its replicas share them as a consumer group.
func gatewayCmd(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error {
	fs.describe("path of the relay's YAML config (its webhook sink, kafka sink, source for the endpoints table, checkpoint.dsn)")
	var kg scaled.Config
	fs.StringVar(&kg.Webhook, "webhook", "", "name of the webhook sink whose endpoints this gateway serves (required)")
	fs.StringVar(&kg.Kafka, "kafka", "", "name of the kafka sink whose topics this gateway reads (required)")
	var topics stringList
	fs.Var(&topics, "topic", "a topic to read; repeatable (default: the kafka sink's topic, when it is not a template)")
	fs.StringVar(&kg.GroupID, "group", "", "consumer group id, the same on every replica (default outbox-relay-gateway-<webhook>)")
	fs.StringVar(&kg.CursorTable, "cursor-table", scaled.DefaultCursorTable, "MySQL table (in checkpoint.dsn's database) of the endpoints' cursors per partition")
	fs.DurationVar(&kg.PollEvery, "table-poll", scaled.DefaultTablePoll, "how often the endpoints table is read")
	fs.IntVar(&kg.MaxRequests, "max-requests", 0, "most webhook requests in flight at once on this replica, over all endpoints and partitions (0: no cap)")
	start := fs.String("start", "earliest", "where a partition the group has no offset for begins: earliest or latest")
	fs.DurationVar(&kg.SessionTimeout, "session-timeout", 0, "consumer group session timeout: a replica silent this long loses its partitions (default 30s)")
	fs.DurationVar(&kg.RebalanceTimeout, "rebalance-timeout", 0, "consumer group rebalance timeout (default 30s)")
	fs.DurationVar(&kg.HeartbeatInterval, "heartbeat", 0, "consumer group heartbeat interval (default 3s)")
	fs.DurationVar(&kg.CommitEvery, "commit-every", 0, "how often offsets are committed and the partition gauges computed (default 5s)")
	if err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	if kg.Webhook == "" || kg.Kafka == "" {
		fmt.Fprintln(fs.Output(), "--webhook and --kafka are required")
		fs.Usage()
		return errUsage
	}
	switch *start {
	case "earliest":
	case "latest":
		kg.StartLatest = true
	default:
		return fmt.Errorf("--start %q: use earliest or latest", *start)
	}
	kg.Topics = topics
	cfg, err := fs.load()
	if err != nil {
		return err
	}
	logger := newLogger(cfg.Log, stderr)
	logger.Info("outbox-relay gateway starting", slog.String("version", buildVersion()), slog.String("config", *fs.path),
		slog.String("webhook", kg.Webhook), slog.String("kafka", kg.Kafka))
	err = relay.New(cfg, relay.Options{Logger: logger, Stdout: stdout, Version: buildVersion()}).RunGateway(ctx, kg)
	if errors.Is(err, context.Canceled) || (err == nil && ctx.Err() != nil) {
		logger.Info("outbox-relay gateway stopped")
		return nil
	}
	return err
}
