package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway/scaled"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replay"
)

// replayCmd makes, lists and cancels replay jobs: a window of the past sent
// again to one sink or endpoint by the running relay (docs/replay.md).
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return replayList(ctx, args[1:], stdout, stderr)
		case "cancel":
			return replayCancel(ctx, args[1:], stdout, stderr)
		}
	}
	return replayCreate(ctx, "replay", args, "", stdout, stderr)
}

// replayCreate makes a replay job (outbox-relay replay, and endpoints
// replay with target "SINK/ENDPOINT").
func replayCreate(ctx context.Context, name string, args []string, target string, stdout, stderr io.Writer) error {
	synopsis := "replay --config FILE --sink SINK [--endpoint ENDPOINT] --since TIME|--from GTID [--until TIME|GTID] [--type GLOB]... [--source binlog|table] [--dry-run]\n       outbox-relay replay list --config FILE\n       outbox-relay replay cancel --config FILE ID"
	if target != "" || name != "replay" {
		synopsis = "endpoints replay --config FILE SINK/ENDPOINT --since TIME|--from GTID [--until TIME|GTID] [--type GLOB]... [--dry-run]\n       outbox-relay endpoints replay --config FILE SINK/ENDPOINT --kafka SINK [--topic T]... [--cursor-table TABLE] --since TIME [--until TIME] [--type GLOB]... [--dry-run]"
	}
	fs := newConfigFlags(name, synopsis, stderr)
	var ask replay.Ask
	if name == "replay" {
		fs.StringVar(&ask.Sink, "sink", "", "the sink to send the window to again (required)")
		fs.StringVar(&ask.Endpoint, "endpoint", "", "a webhook sink's endpoint: the one the window goes to (required for a webhook sink)")
	}
	since := fs.String("since", "", "start of the window: a time (RFC 3339, '2006-01-02 15:04:05' UTC) or a duration ago (90m, 2h, 168h)")
	fs.StringVar(&ask.From, "from", "", "start of the window as a GTID set: the events committed after it (instead of --since)")
	until := fs.String("until", "", "end of the window: a time (as --since; the events committed before it) or a GTID set (the events up to it); default: now")
	var types stringList
	fs.Var(&types, "type", "send only events whose type matches this pattern (path.Match: * ? [a-z]); repeat for more")
	fs.StringVar(&ask.Source, "source", replay.SourceBinlog, "where to read the window: binlog (the source server's binlog) or table (the outbox table's retained rows)")
	fs.StringVar(&ask.Where, "where", "", "--source table: an SQL condition selecting the rows")
	dry := fs.Bool("dry-run", false, "read the window and count what would be sent; send nothing, make no job")
	var kg scaled.Config
	var topics stringList
	if name != "replay" {
		fs.StringVar(&kg.Kafka, "kafka", "", "the endpoint is served by the scaled-out gateway (outbox-relay gateway) reading this kafka sink's topics: the window is read from them")
		fs.Var(&topics, "topic", "with --kafka: a topic the gateway reads; repeatable (default: the kafka sink's topic), as outbox-relay gateway --topic")
		fs.StringVar(&kg.CursorTable, "cursor-table", scaled.DefaultCursorTable, "with --kafka: the gateway's cursor table (outbox-relay gateway --cursor-table), where the job is kept")
	}
	if err := parseFlags(fs.FlagSet, args); err != nil {
		return err
	}
	rest := fs.Args()
	if name != "replay" {
		if len(rest) == 0 || !strings.Contains(rest[0], "/") {
			fmt.Fprintln(stderr, "name one endpoint as SINK/ENDPOINT (outbox-relay status lists them)")
			fs.Usage()
			return errUsage
		}
		ask.Sink, ask.Endpoint, _ = strings.Cut(rest[0], "/")
		// Flags may follow the endpoint too.
		if err := parseFlags(fs.FlagSet, rest[1:]); err != nil {
			return err
		}
		rest = fs.Args()
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", rest[0])
		fs.Usage()
		return errUsage
	}
	if ask.Sink == "" {
		fmt.Fprintln(stderr, "--sink is required: the sink to replay to")
		fs.Usage()
		return errUsage
	}
	ask.Types = types
	now := time.Now().UTC()
	var err error
	if *since != "" {
		if ask.Since, err = parseWindowTime(*since, now); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
	}
	if *until != "" {
		if t, err := parseWindowTime(*until, now); err == nil {
			ask.UntilTime = t
		} else {
			ask.Until = *until
		}
	}
	cfg, err := fs.load()
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	if kg.Kafka != "" {
		kg.Topics = topics
		return replayGateway(ctx, cfg, kg, ask, now, *dry, stdout, stderr)
	}
	p, err := relay.NewReplayPlanner(ctx, relay.New(cfg, relay.Options{Logger: log}))
	if err != nil {
		return err
	}
	defer p.Close()
	job, err := p.Plan(ctx, ask, now)
	if err != nil {
		return err
	}
	if *dry {
		send, skipped, err := p.DryRun(ctx, job)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dry run: %d events would be sent to %s, %d passed over by the filters; window %s (after %s) up to %s (%s); nothing was sent, no job was made\n",
			send, printable.String(job.Key()), skipped, when(job.Since), job.From, when(job.UntilTime), job.Until)
		return nil
	}
	how, err := submit(ctx, cfg, replay.Request{Job: &job})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replay job %s made: %s to %s, window %s (after %s) up to %s (%s); %s\n",
		job.ID, job.Source, printable.String(job.Key()), when(job.Since), job.From, when(job.UntilTime), job.Until, how)
	return nil
}

// replayGateway makes a replay job for an endpoint of the scaled-out
// gateway: its window is read from the Kafka topics (endpoints replay
// --kafka), and it is kept in the gateway's cursor table, where the
// replica that holds that table's lock runs it.
func replayGateway(ctx context.Context, cfg *config.Config, kg scaled.Config, ask replay.Ask, now time.Time, dry bool, stdout, stderr io.Writer) error {
	rl := relay.New(cfg, relay.Options{Logger: newLogger(cfg.Log, stderr)})
	job, err := scaled.PlanReplay(ctx, cfg, rl, kg, ask, now)
	if err != nil {
		return err
	}
	if dry {
		send, skipped, err := scaled.DryRunReplay(ctx, cfg, rl, kg, job)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dry run: %d events would be sent to %s, %d passed over by the filters; window %s (%s) up to %s (%s); nothing was sent, no job was made\n",
			send, printable.String(job.Key()), skipped, when(job.Since), job.From.File, when(job.UntilTime), job.Until.File)
		return nil
	}
	jobs, closeJobs, err := scaled.OpenJobs(ctx, cfg, kg.CursorTable, false)
	if err != nil {
		return err
	}
	defer closeJobs()
	if err := jobs.Put(ctx, job); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replay job %s made: %s to %s, window %s (%s) up to %s (%s); a running gateway replica starts it within replay.poll (%s): outbox-relay replay list --gateway shows it\n",
		job.ID, job.Source, printable.String(job.Key()), when(job.Since), job.From.File, when(job.UntilTime), job.Until.File, cfg.Replay.Poll)
	return nil
}

// when renders a time asked for, or "-".
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// parseWindowTime reads a time (RFC 3339, "2006-01-02 15:04:05" or
// "2006-01-02T15:04:05" in UTC, "2006-01-02") or a duration before now.
func parseWindowTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2026-12-02T10:00:00Z, '2026-12-02 10:00:00' UTC) nor a duration ago (90m, 2h)", s)
}

// submit hands a request to the relay: with the MySQL store, by writing
// the store (a running relay lists it every replay.poll); with the file
// store, through the spool while a relay holds the file, else by writing
// the file under its lock.
func submit(ctx context.Context, cfg *config.Config, req replay.Request) (string, error) {
	if cfg.Checkpoint.Store != "mysql" {
		held, err := checkpoint.FileLockHeld(cfg.Checkpoint.Path)
		if err != nil {
			return "", err
		}
		if held {
			if err := replay.SpoolFor(cfg.Checkpoint.Path).Put(req); err != nil {
				return "", err
			}
			return fmt.Sprintf("the running relay takes it up within replay.poll (%s): outbox-relay replay list shows it", cfg.Replay.Poll), nil
		}
	}
	store, closeStore, err := checkpoint.Open(ctx, cfg, nil)
	if err != nil {
		return "", err
	}
	defer closeStore()
	defer store.Close()
	if cfg.Checkpoint.Store != "mysql" {
		// No relay holds the file: hold it while writing, so a relay
		// starting now reads the file after the write.
		if l, ok := store.(checkpoint.Locker); ok {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			release, _, err := l.Lock(lctx)
			cancel()
			if err != nil { // a relay took it meanwhile
				if err := replay.SpoolFor(cfg.Checkpoint.Path).Put(req); err != nil {
					return "", err
				}
				return "a relay started meanwhile: it takes it up within replay.poll", nil
			}
			defer release()
		}
	}
	jobs, err := replay.NewStore(store)
	if err != nil {
		return "", err
	}
	switch {
	case req.Job != nil:
		if err := jobs.Put(ctx, *req.Job); err != nil {
			return "", err
		}
		if cfg.Checkpoint.Store == "mysql" {
			return fmt.Sprintf("a running relay starts it within replay.poll (%s); outbox-relay replay list shows it", cfg.Replay.Poll), nil
		}
		return "no relay runs now: it starts with the next outbox-relay run", nil
	default:
		if cfg.Checkpoint.Store == "mysql" {
			if err := jobs.RequestCancel(ctx, req.Cancel, req.Why); err != nil {
				return "", err
			}
			return fmt.Sprintf("a running relay stops it within replay.poll (%s)", cfg.Replay.Poll), nil
		}
		if err := jobs.Cancel(ctx, req.Cancel, req.Why); err != nil {
			return "", err
		}
		return "cancelled", nil
	}
}

// replayList prints every replay job.
func replayList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("replay list", "replay list --config FILE [--gateway [--cursor-table TABLE]]", stderr)
	gw, table := gatewayFlags(fs.FlagSet)
	if err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	if *gw {
		cfg, err := fs.load(checkpointSections...)
		if err != nil {
			return err
		}
		jobs, closeJobs, err := scaled.OpenJobs(ctx, cfg, *table, true)
		if err != nil {
			return err
		}
		defer closeJobs()
		l, err := jobs.List(ctx)
		if err != nil {
			return err
		}
		printJobs(stdout, l, nil)
		return nil
	}
	cfg, store, closeStore, err := fs.openCheckpointsReadOnly(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	jobs, err := replay.NewStore(store)
	if err != nil {
		return err
	}
	l, err := jobs.List(ctx)
	if err != nil {
		return err
	}
	var spooled []replay.Spooled
	if cfg.Checkpoint.Store != "mysql" {
		spooled, err = replay.SpoolFor(cfg.Checkpoint.Path).Take()
		if err != nil {
			fmt.Fprintf(stderr, "replay requests: %v\n", err)
		}
	}
	printJobs(stdout, l, spooled)
	return nil
}

// printJobs writes the jobs as a table, with the requests not yet adopted.
func printJobs(w io.Writer, l replay.Listing, spooled []replay.Spooled) {
	if len(l.Jobs) == 0 && len(spooled) == 0 {
		fmt.Fprintln(w, "no replay jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTARGET\tSOURCE\tSENT\tSKIPPED\tSINCE\tUNTIL\tCREATED\tNOTE")
	for _, j := range l.Jobs {
		note := j.Error
		if why, ok := l.Cancel[j.ID]; ok && !j.State.Final() {
			note = "cancel asked: " + why
		}
		if len(j.Types) > 0 {
			note = strings.TrimSpace("types " + strings.Join(j.Types, ",") + " " + note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", j.ID, j.State, printable.String(j.Key()), j.Source, j.Sent, j.Skipped,
			orPos(j.Since, j.From.String()), orPos(j.UntilTime, j.Until.String()), j.CreatedAt.Format(time.RFC3339), printable.String(note))
	}
	for _, s := range spooled {
		switch {
		case s.Job != nil:
			fmt.Fprintf(tw, "%s\trequested\t%s\t%s\t-\t-\t%s\t%s\t%s\tnot yet taken up by the running relay\n", s.Job.ID, printable.String(s.Job.Key()), s.Job.Source,
				orPos(s.Job.Since, s.Job.From.String()), orPos(s.Job.UntilTime, s.Job.Until.String()), s.Job.CreatedAt.Format(time.RFC3339))
		case s.Cancel != "":
			fmt.Fprintf(tw, "%s\tcancel requested\t-\t-\t-\t-\t-\t-\t-\tnot yet taken up by the running relay\n", s.Cancel)
		}
	}
	tw.Flush()
}

// gatewayFlags are the flags of replay list and cancel that name the
// scaled-out gateway's jobs instead of the relay's.
func gatewayFlags(fs *flag.FlagSet) (gw *bool, table *string) {
	gw = fs.Bool("gateway", false, "the jobs of the scaled-out gateway (outbox-relay gateway; endpoints replay --kafka), kept in its cursor table, instead of the relay's")
	table = fs.String("cursor-table", scaled.DefaultCursorTable, "with --gateway: the gateway's cursor table (outbox-relay gateway --cursor-table)")
	return gw, table
}

func orPos(t time.Time, pos string) string {
	if !t.IsZero() {
		return t.UTC().Format(time.RFC3339)
	}
	return pos
}

// replayCancel cancels a job.
func replayCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("replay cancel", "replay cancel --config FILE [--gateway [--cursor-table TABLE]] ID", stderr)
	gw, table := gatewayFlags(fs.FlagSet)
	if err := parseFlags(fs.FlagSet, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "name the job to cancel (outbox-relay replay list shows them)")
		fs.Usage()
		return errUsage
	}
	id := fs.Arg(0)
	if !replay.ValidID(id) {
		return fmt.Errorf("%q is not a replay job id: outbox-relay replay list shows them", printable.String(id))
	}
	cfg, err := fs.load()
	if err != nil {
		return err
	}
	if *gw {
		jobs, closeJobs, err := scaled.OpenJobs(ctx, cfg, *table, false)
		if err != nil {
			return err
		}
		defer closeJobs()
		if err := jobs.RequestCancel(ctx, id, "cancelled at "+time.Now().UTC().Format(time.RFC3339)+" by outbox-relay replay cancel"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replay job %s: the gateway replica running it stops it within replay.poll (%s)\n", id, cfg.Replay.Poll)
		return nil
	}
	// The job must exist (a request for an unknown id would wait for ever).
	store, closeStore, err := checkpoint.OpenReadOnly(ctx, cfg)
	if err != nil {
		return err
	}
	jobs, err := replay.NewStore(store)
	if err == nil {
		var j replay.Job
		j, err = jobs.Get(ctx, id)
		if err == nil && j.State.Final() {
			err = fmt.Errorf("replay job %s is already %s", id, j.State)
		}
	}
	closeStore()
	store.Close()
	if errors.Is(err, replay.ErrNoJob) && cfg.Checkpoint.Store != "mysql" {
		// Maybe still in the spool: cancel the request itself.
		sp := replay.SpoolFor(cfg.Checkpoint.Path)
		reqs, _ := sp.Take()
		for _, r := range reqs {
			if r.Job != nil && r.Job.ID == id {
				err = nil
			}
		}
	}
	if err != nil {
		return err
	}
	how, err := submit(ctx, cfg, replay.Request{Cancel: id, Why: "cancelled at " + time.Now().UTC().Format(time.RFC3339) + " by outbox-relay replay cancel"})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replay job %s: %s\n", id, how)
	return nil
}
