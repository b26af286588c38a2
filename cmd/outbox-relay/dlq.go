package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/relay"
)

// dlqUsage is `outbox-relay dlq --help`.
const dlqUsage = `Usage: outbox-relay dlq <list|replay|purge> --config FILE [selectors]

Dead letters are events a sink could not deliver for good. Selectors:
  --id ID        a record id (repeatable)
  --sink NAME    records of one sink (a webhook endpoint is "sink/endpoint"; a webhook
                 sink's name selects all its endpoints)
  --since TIME   stored at or after TIME (RFC 3339, or a duration ago like 2h)
  --until TIME   stored before TIME
  --tenant NAME  records of one tenant: those its endpoints stored, deleted ones' too
  --all          every record (replay and purge need a selector or --all)

  list    print the records
  replay  deliver them again; a record leaves the store only once its sink acknowledged it
          (a tenant's record only to an endpoint of that tenant: one deleted and made
          again by another tenant keeps it)
  purge   delete them
`

func dlqCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if help, err := verbHelp(args, dlqUsage, stdout, stderr); help {
		return err
	}
	verb := args[0]
	if verb != "list" && verb != "replay" && verb != "purge" {
		return unknownVerb("dlq", verb, dlqUsage, stderr)
	}
	fs := newConfigFlags("dlq "+verb, "dlq "+verb+" --config FILE [--id ID]... [--sink NAME] [--tenant NAME] [--since TIME] [--until TIME] [--all]", stderr)
	var ids multiFlag
	fs.Var(&ids, "id", "record id (repeatable)")
	sinkName := fs.String("sink", "", "only records of this sink")
	since := fs.String("since", "", "stored at or after (RFC 3339 or duration ago)")
	until := fs.String("until", "", "stored before (RFC 3339 or duration ago)")
	tenant := fs.String("tenant", "", "only records of this tenant")
	all := fs.Bool("all", false, "select every record")
	asJSON := fs.Bool("json", false, "list: print records as JSON lines")
	if err := parse(fs.FlagSet, args[1:]); err != nil {
		return err
	}
	f := deadletter.Filter{IDs: ids, Sink: *sinkName, Tenant: *tenant}
	var err error
	if f.Since, err = parseWhen(*since); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = parseWhen(*until); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	selected := len(ids) > 0 || *sinkName != "" || *tenant != "" || *since != "" || *until != "" || *all
	if verb != "list" && !selected {
		fmt.Fprintf(stderr, "dlq %s needs a selector (--id, --sink, --tenant, --since, --until) or --all\n", verb)
		return errUsage
	}
	// list and purge read only the dead-letter store: a sink's unset
	// ${SECRET} does not stop them; replay builds the sinks.
	var sections []string // all
	if verb != "replay" {
		sections = []string{"checkpoint", "dead_letter", "log"}
	}
	cfg, err := fs.load(sections...)
	if err != nil {
		return err
	}
	open := deadletter.Open
	if verb == "list" {
		open = deadletter.OpenReadOnly // list writes nothing, not even a table
	}
	store, closeStore, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	if store == nil {
		return errors.New("dead_letter.store is none: there is no dead-letter store to read")
	}
	defer closeStore()
	recs, err := store.List(ctx, f)
	if err != nil {
		return err
	}
	switch verb {
	case "list":
		return printRecords(stdout, recs, *asJSON)
	case "purge":
		rids := make([]string, len(recs))
		for i, r := range recs {
			rids[i] = r.ID
		}
		if err := store.Delete(ctx, rids...); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "purged %d dead letters\n", len(recs))
		return nil
	default:
		return replayDeadLetters(ctx, cfg, store, recs, stdout, newLogger(cfg.Log, stderr))
	}
}

// replayDeadLetters delivers each record's event to its sink again
// (relay.ReplayDeadLetters) and says how it went.
func replayDeadLetters(ctx context.Context, cfg *config.Config, store deadletter.Store, recs []deadletter.Record, stdout io.Writer, logger *slog.Logger) error {
	ok, failed, err := relay.New(cfg, relay.Options{Logger: logger, Stdout: stdout}).ReplayDeadLetters(ctx, store, recs)
	if ok+failed > 0 || err == nil {
		fmt.Fprintf(stdout, "replayed %d dead letters, %d failed\n", ok, failed)
	}
	return err
}

func printRecords(w io.Writer, recs []deadletter.Record, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for _, r := range recs {
			if err := enc.Encode(recordLine(r)); err != nil {
				return err
			}
		}
		return nil
	}
	// Every column may hold text from outside (a receiver's reply, an
	// event's ids): control characters are escaped, never interpreted.
	p := printable.String
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSINK\tTENANT\tEVENT\tAGGREGATE\tATTEMPTS\tSTORED\tREASON")
	for _, r := range recs {
		reason := p(r.Reason)
		if len(reason) > 100 {
			reason = strings.ToValidUTF8(reason[:100], "") + "…"
		}
		var id, agg string
		if r.Event != nil {
			id, agg = r.Event.ID, r.Event.AggregateID
		}
		tenant := p(r.Tenant)
		if tenant == "" {
			tenant = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p(r.ID), p(r.Sink), tenant, p(id), p(agg), r.Attempts, r.Stored.Format(time.RFC3339), reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d dead letters\n", len(recs))
	return nil
}

// jsonRecord is a record as dlq list --json prints it: the record's own
// fields, and its event as the stdout sink writes one (snake_case keys, a
// JSON payload embedded as JSON).
type jsonRecord struct {
	deadletter.Record
	Event *jsonline.Line `json:"event"` // shadows Record.Event
}

func recordLine(r deadletter.Record) jsonRecord {
	j := jsonRecord{Record: r}
	if r.Event != nil {
		l := jsonline.From(r.Event)
		j.Event = &l
	}
	return j
}

func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-01-02T15:04:05Z) nor a duration (2h)", s)
	}
	return t, nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

var _ flag.Value = (*multiFlag)(nil)
