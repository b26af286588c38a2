package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/source"
)

// errMissing is the audit's verdict when events are missing (exit 1).
var errMissing = errors.New("events are missing at the destination")

// auditCmd re-reads a binlog range and checks a sink's destination holds
// every committed outbox event of it.
func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("audit", "audit --config FILE --sink NAME --from GTID-SET|TIME --to GTID-SET|TIME [--received FILE]", stderr)
	path := fs.String("config", "outbox-relay.yaml", "path of the YAML config")
	sinkName := fs.String("sink", "", "the sink to audit (a webhook sink: all its endpoints, or one as sink/endpoint)")
	fromS := fs.String("from", "", "start: a GTID set (the transactions after it, as a checkpoint) or a commit time (RFC 3339 or '2006-01-02 15:04:05' UTC; read from the oldest binlog)")
	toS := fs.String("to", "", "end, inclusive: a GTID set or a commit time; default: the server's position now")
	receivedPath := fs.String("received", "", "webhook: a file of the ids the receiver got, one a line, to match instead of trusting acknowledgements")
	limit := fs.Int("list", 100, "list at most this many ids of each kind")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *sinkName == "" || *fromS == "" {
		fmt.Fprintln(stderr, "--sink and --from are required")
		fs.Usage()
		return errUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	from, err := audit.ParseBound(*fromS)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	var to audit.Bound
	if *toS != "" {
		if to, err = audit.ParseBound(*toS); err != nil {
			return fmt.Errorf("--to: %w", err)
		}
	}
	var sc *config.Sink
	endpoints := []string{}
	for i, s := range cfg.Sinks {
		base, ep, _ := strings.Cut(*sinkName, "/")
		if s.Name != base {
			continue
		}
		sc = &cfg.Sinks[i]
		if s.Type == "webhook" && s.Webhook != nil {
			for _, e := range s.Webhook.Endpoints {
				if ep == "" || ep == e.Name {
					endpoints = append(endpoints, s.Name+"/"+e.Name)
				}
			}
		}
	}
	switch {
	case sc == nil:
		return fmt.Errorf("--sink %q: no such sink in %s", *sinkName, *path)
	case sc.Type == "stdout":
		return fmt.Errorf("--sink %s: a stdout sink cannot be read back, so it is not auditable", sc.Name)
	case sc.Type == "webhook" && len(endpoints) == 0:
		return fmt.Errorf("--sink %q: no such webhook endpoint", *sinkName)
	}

	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		return err
	}
	defer db.Close()
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		return err
	}
	cur, err := canal.CurrentPosition(ctx, db, info)
	if err != nil {
		return err
	}
	start := event.Position{GTIDSet: from.GTID}
	if from.GTID == "" {
		if start, err = canal.EarliestPosition(ctx, db, info); err != nil {
			return err
		}
	}
	if from.GTID != "" {
		if err := canal.CheckResume(ctx, db, info, start); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
	}
	rc, err := relay.AuditReader(cfg, info, newLogger(cfg.Log, stderr).With(slog.String("component", "audit")))
	if err != nil {
		return err
	}
	rng := audit.Range{From: from, To: to}

	var reports []audit.Report
	switch sc.Type {
	case "kafka":
		kc := *sc.Kafka
		kc.Defaults()
		rb, err := kafka.NewReadBack(kc)
		if err != nil {
			return err
		}
		idx, err := audit.Collect(ctx, rc, rng, start, cur, rb.Topic)
		if err != nil {
			return err
		}
		rep, err := audit.Kafka(ctx, idx, sc.Name, kc.Brokers, rb)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	case "webhook":
		idx, err := audit.Collect(ctx, rc, rng, start, cur, nil)
		if err != nil {
			return err
		}
		var received map[string]int
		if *receivedPath != "" {
			if received, err = readIDs(*receivedPath); err != nil {
				return err
			}
		}
		store, closeStore, err := relay.OpenStoreReadOnly(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeStore()
		dl, closeDL, err := relay.OpenDeadLettersReadOnly(ctx, cfg)
		if err != nil {
			return err
		}
		defer closeDL()
		for _, name := range endpoints {
			cp, err := store.Load(ctx, name)
			found := err == nil
			if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
				return err
			}
			dead := map[string]string{}
			if dl != nil {
				recs, err := dl.List(ctx, deadletter.Filter{Sink: name})
				if err != nil {
					return err
				}
				for _, r := range recs {
					if r.Event != nil {
						dead[r.Event.ID] = r.Reason
					}
				}
			}
			reports = append(reports, audit.Webhook(idx, name, info.Flavor, cp, found, dead, received))
		}
	default:
		return fmt.Errorf("--sink %s: type %s cannot be audited", sc.Name, sc.Type)
	}
	missing := false
	for _, r := range reports {
		printAudit(stdout, r, from, to, *limit)
		missing = missing || !r.OK()
	}
	if missing {
		return errMissing
	}
	return nil
}

func printAudit(w io.Writer, r audit.Report, from, to audit.Bound, limit int) {
	p := printable.String
	end := "the server's position at the start"
	if to != (audit.Bound{}) {
		end = to.String()
	}
	fmt.Fprintf(w, "sink %s: range after %s to %s: %d transactions, %d outbox events", p(r.Sink), p(from.String()), p(end), r.Transactions, r.Events)
	if r.Events > 0 {
		fmt.Fprintf(w, " committed %s … %s", r.First.Format("2006-01-02 15:04:05Z"), r.Last.Format("2006-01-02 15:04:05Z"))
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", p(n))
	}
	fmt.Fprintf(w, "missing: %d\n", len(r.Missing))
	for i, m := range r.Missing {
		if i == limit {
			fmt.Fprintf(w, "  … %d more\n", len(r.Missing)-limit)
			break
		}
		fmt.Fprintf(w, "  %s aggregate %s gtid %s committed %s: %s\n", p(m.ID), p(m.AggregateID), p(m.GTID), m.Commit.Format("2006-01-02 15:04:05Z"), p(m.Why))
	}
	fmt.Fprintf(w, "unexpected: %d\n", len(r.Unexpected))
	for i, u := range r.Unexpected {
		if i == limit {
			fmt.Fprintf(w, "  … %d more\n", len(r.Unexpected)-limit)
			break
		}
		fmt.Fprintf(w, "  %s\n", p(u))
	}
	dups := slices.Sorted(func(yield func(string) bool) {
		for id := range r.Duplicates {
			if !yield(id) {
				return
			}
		}
	})
	fmt.Fprintf(w, "duplicates: %d (at-least-once delivery: not an error)\n", len(dups))
	for i, id := range dups {
		if i == limit {
			fmt.Fprintf(w, "  … %d more\n", len(dups)-limit)
			break
		}
		fmt.Fprintf(w, "  %s ×%d\n", p(id), r.Duplicates[id])
	}
	fmt.Fprintf(w, "order violations: %d\n", len(r.Order))
	for i, o := range r.Order {
		if i == limit {
			fmt.Fprintf(w, "  … %d more\n", len(r.Order)-limit)
			break
		}
		fmt.Fprintf(w, "  %s\n", p(o))
	}
}

// readIDs reads ids, one a line (blank lines ignored), counting repeats.
func readIDs(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--received: %w", err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if id := strings.TrimSpace(sc.Text()); id != "" {
			out[id]++
		}
	}
	return out, sc.Err()
}
