package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/check"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/source"
)

func checkCmd(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error {
	retentionMin := startupCheckFlags(fs)
	cfg, err := fs.parseAndLoad(args)
	if err != nil {
		return err
	}
	newLogger(cfg.Log, stderr) // the probes' library logs (go-redis) go through it
	opts := check.Options{RetentionMin: *retentionMin, Sinks: true}
	if opts.Commits, err = checkCommits(cfg); err != nil {
		return err
	}
	rep, err := check.Run(ctx, cfg, opts)
	if err != nil {
		// The checks made on the config alone: their warnings still count.
		for _, x := range rep.Results {
			if x.Status != check.Pass {
				check.PrintResult(stdout, x)
			}
		}
		return err
	}
	rep.Print(stdout)
	return failedError(rep)
}

// checkCommits is what reads a MariaDB checkpoint's commit time for
// `check` (check.Options.Commits), with one source server (nil with
// several): a binlog dump with the replica id of the commands (`outbox-relay
// audit`'s), not the running relay's. check asks it of MariaDB only.
func checkCommits(cfg *config.Config) (source.CommitFinder, error) {
	addrs := cfg.Source.Addrs()
	if len(addrs) != 1 {
		return nil, nil
	}
	tc, err := source.TLSConfig(cfg.Source.TLS, addrs[0].Host)
	if err != nil {
		return nil, err
	}
	return canal.NewCommitFinder(canal.ScanConfig{Host: addrs[0].Host, Port: uint16(addrs[0].Port), User: cfg.Source.User,
		Password: cfg.Source.Password.Reveal(), TLS: tc, ServerID: cfg.Source.ServerID + uint32(cfg.ReplicaIDs()),
		Flavor: mysql.MariaDBFlavor, ReadTimeout: cfg.Source.ReadTimeout}), nil
}

// failedError is nil when nothing FAILed, else an error naming the checks.
func failedError(rep check.Report) error {
	failed := rep.Failed()
	if len(failed) == 0 {
		return nil
	}
	var names []string
	for _, f := range failed {
		if !containsString(names, f.Name) {
			names = append(names, f.Name)
		}
	}
	return fmt.Errorf("%d check(s) FAILED: %s", len(failed), strings.Join(names, ", "))
}

func containsString(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// startupChecks runs the checks before the relay starts: warnings (and
// downgraded failures) are logged, failures printed and returned.
func startupChecks(ctx context.Context, cfg *config.Config, opts check.Options, logger *slog.Logger, stderr io.Writer) error {
	rep, err := check.Run(ctx, cfg, opts)
	if err != nil {
		logWarnings(rep, logger)
		return err
	}
	warnings := logWarnings(rep, logger)
	failed := rep.Failed()
	if len(failed) == 0 {
		logger.Info("startup checks done: nothing FAILed", slog.Int("checks", len(rep.Results)), slog.Int("warnings", warnings))
		return nil
	}
	for _, x := range failed {
		check.PrintResult(stderr, x)
	}
	return fmt.Errorf("refusing to start: %w (fix them, or start anyway with --allow-fail NAME)", failedError(rep))
}

// logWarnings logs every WARN of rep (downgraded FAILs included), one line
// each, and returns their number.
func logWarnings(rep check.Report, logger *slog.Logger) int {
	warnings := 0
	for _, x := range rep.Results {
		if x.Status == check.Warn {
			warnings++
		}
		switch {
		case x.Downgraded:
			logger.Warn(fmt.Sprintf("check %s FAILED but was downgraded by --allow-fail", x.Name),
				slog.String("check", x.Name), slog.String("detail", x.Detail), slog.String("fix", x.Fix))
		case x.Name == check.NameInsecureSettings && x.Status == check.Warn:
			logger.Warn("insecure setting: "+x.Detail, slog.String("check", x.Name), slog.String("fix", x.Fix))
		case x.Status == check.Warn:
			logger.Warn("check warning", slog.String("check", x.Name), slog.String("detail", x.Detail), slog.String("fix", x.Fix))
		}
	}
	return warnings
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
