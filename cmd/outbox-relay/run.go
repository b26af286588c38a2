package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/check"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink"
)

func runCmd(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error {
	retentionMin := startupCheckFlags(fs)
	var allowFail stringList
	fs.Var(&allowFail, "allow-fail", "start even though the named startup check FAILs (logged as a warning); repeatable, e.g. --allow-fail gtid_mode --allow-fail server_id")
	cfg, err := fs.parseAndLoad(args)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.Log, stderr)
	logger.Info("outbox-relay starting", slog.String("version", buildVersion()), slog.String("config", *fs.path))
	ro := relay.Options{Logger: logger, Stdout: stdout, Version: buildVersion()}
	if cfg.Console.Listen != "" {
		// SIGHUP reloads the console's tokens (docs/console.md), from now on
		// (one during the startup checks waits for the console); without a
		// console it keeps its default, ending the process.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		ro.Reload = hup
		ro.ReadConfig = func() (*config.Config, error) { return fs.load("console") }
	}
	// outbox_growth (it only WARNs, and may scan a whole outbox table) is
	// made once the relay has started, beside its stream.
	opts := check.Options{RetentionMin: *retentionMin, AllowFail: allowFail, SkipGrowth: true}
	if err := startupChecks(ctx, cfg, opts, logger, stderr); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	go growthCheck(ctx, cfg, logger)
	err = relay.New(cfg, ro).Run(ctx)
	if errors.Is(err, context.Canceled) || (err == nil && ctx.Err() != nil) {
		logger.Info("outbox-relay stopped")
		return nil
	}
	return err
}

// startupCheckFlags declares the flags run and check share, those of the
// startup checks: --config, its usage pointing at the example config, and
// --retention-min, which it returns.
func startupCheckFlags(fs configFlags) *time.Duration {
	fs.describe("path of the YAML config (see deploy/config.example.yaml)")
	return fs.Duration("retention-min", 24*time.Hour, "WARN when binlogs expire sooner than this (the longest sink outage to survive)")
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: c.SlogLevel()}
	var log *slog.Logger
	if c.Format == "json" {
		log = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		log = slog.New(slog.NewTextHandler(w, opts))
	}
	// Client libraries that log through one process-wide logger (go-redis)
	// log through the command's.
	for _, k := range sink.Kinds() {
		if k.LibraryLogger != nil {
			k.LibraryLogger(log)
		}
	}
	return log
}

// growthCheck runs the outbox_growth check and logs its warnings, as the
// startup checks log theirs.
func growthCheck(ctx context.Context, cfg *config.Config, logger *slog.Logger) {
	rep, err := check.Growth(ctx, cfg)
	if err != nil {
		if ctx.Err() == nil {
			logger.Warn("check outbox_growth could not run", slog.Any("err", err))
		}
		return
	}
	logWarnings(rep, logger)
}
