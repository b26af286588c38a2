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
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// errMissing is the audit's verdict when events are missing (exit 1).
var errMissing = errors.New("events are missing at the destination")

// auditCmd re-reads a binlog range and checks a sink's destination holds
// every committed outbox event of it.
func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The kinds' own audit flags (sink.Kind.AuditFlags), such as
	// rabbitmq's --queue.
	kindFlags := map[string]*string{}
	synopsis := "audit --config FILE --sink NAME --from GTID-SET|TIME [--to GTID-SET|TIME] [--memory SIZE] [--temp-dir DIR] [--received FILE]"
	for _, k := range sink.Kinds() {
		for _, f := range k.AuditFlags {
			if _, ok := kindFlags[f.Name]; !ok { // two kinds may share one
				kindFlags[f.Name] = nil
				synopsis += fmt.Sprintf(" [--%s %s]", f.Name, f.Value)
			}
		}
	}
	fs := newConfigFlags("audit", synopsis+" [--clock-skew D]", stderr)
	sinkName := fs.String("sink", "", "the sink to audit (a webhook sink: all its endpoints, or one as sink/endpoint)")
	fromS := fs.String("from", "", "start: a GTID set (the transactions after it, as a checkpoint) or a commit time (RFC 3339 or '2006-01-02 15:04:05' UTC; read from the oldest binlog)")
	toS := fs.String("to", "", "end, inclusive: a GTID set or a commit time; default: the server's position now")
	receivedPath := fs.String("received", "", "webhook: a file of the ids the receiver got, one a line, to match instead of trusting acknowledgements")
	limit := fs.Int("list", audit.DefaultList, "list at most this many ids of each kind")
	memoryS := fs.String("memory", "256MiB", "the most memory the comparison's sort buffers take (K, M, G: binary units); past it they spill to --temp-dir")
	skew := fs.Duration("clock-skew", time.Minute, "nats, redis: how far the destination server's clock may be behind the source's (messages are found by the time they were stored)")
	for _, k := range sink.Kinds() {
		for _, f := range k.AuditFlags {
			if kindFlags[f.Name] == nil {
				kindFlags[f.Name] = fs.String(f.Name, "", f.Usage)
			}
		}
	}
	tempDir := fs.String("temp-dir", "", "where the comparison spills when it outgrows --memory (default: $TMPDIR or /tmp)")
	if err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	if *sinkName == "" || *fromS == "" {
		fmt.Fprintln(stderr, "--sink and --from are required")
		fs.Usage()
		return errUsage
	}
	memory, err := parseSize(*memoryS)
	if err != nil || memory < audit.MinMemory {
		return fmt.Errorf("--memory %q: give a size of at least 64KiB, such as 256MiB or 2GiB", *memoryS)
	}
	cfg, err := fs.load()
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
		if f, ok := s.Config.(config.FanOut); ok {
			for _, e := range f.StaticEndpoints() {
				if ep == "" || ep == e {
					endpoints = append(endpoints, s.Name+"/"+e)
				}
			}
		}
	}
	if sc == nil {
		return fmt.Errorf("--sink %q: no such sink in %s", *sinkName, *fs.path)
	}
	// A kind whose destination can be read back declares an Auditor; a
	// gateway (webhook) sink is audited against its endpoints' checkpoints
	// and dead letters.
	kind, _ := sink.KindOf(sc.Type)
	_, fanOut := sc.Config.(config.FanOut)
	var auditor sink.Auditor
	switch {
	case kind.Audit != nil:
		given := map[string]string{}
		for _, f := range kind.AuditFlags {
			if v := *kindFlags[f.Name]; v != "" {
				given[f.Name] = v
			}
		}
		for name, v := range kindFlags {
			if _, ours := given[name]; *v != "" && !ours {
				return fmt.Errorf("--%s is not a setting of a %s sink's audit: leave it out", name, sc.Type)
			}
		}
		if auditor, err = kind.Audit(sink.AuditParams{Config: sc.Config, ClockSkew: *skew, Flags: given}); err != nil {
			return fmt.Errorf("--sink %s: %w", sc.Name, err)
		}
		defer auditor.Close()
	case !fanOut:
		return fmt.Errorf("--sink %s: a %s sink cannot be read back, so it is not auditable", sc.Name, sc.Type)
	case len(endpoints) == 0:
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
	cur, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		return err
	}
	rc, err := audit.Reader(cfg, info, newLogger(cfg.Log, stderr).With(slog.String("component", "audit")))
	if err != nil {
		return err
	}
	start := event.Position{GTIDSet: from.GTID}
	if from.GTID != "" {
		if err := source.CheckResume(ctx, db, info, start); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
	} else {
		files, err := source.BinaryLogs(ctx, db)
		if err != nil {
			return err
		}
		var fs audit.FileStart
		if start, fs, err = audit.StartFor(ctx, rc, source.FileNames(files), from.Time); err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		fmt.Fprintf(stderr, "audit: reading from binlog %s, begun %s\n", fs.File, fs.Begun.Format(time.RFC3339))
	}
	rng := audit.Range{From: from, To: to}
	opts := audit.Options{Memory: memory, TempDir: *tempDir, List: *limit}

	var reports []audit.Report
	if auditor != nil {
		rep, err := audit.Run(ctx, opts, rc, rng, start, cur, sc.Name, auditor)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
	} else if reports, err = auditWebhook(ctx, cfg, opts, rc, rng, start, cur, info.Flavor, endpoints, *receivedPath); err != nil {
		return err
	}
	missing := false
	for _, r := range reports {
		printAudit(stdout, r, from, to)
		missing = missing || !r.OK()
	}
	if missing {
		return errMissing
	}
	return nil
}

func printAudit(w io.Writer, r audit.Report, from, to audit.Bound) {
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
	fmt.Fprintf(w, "missing: %d\n", r.MissingCount)
	for _, m := range r.Missing {
		fmt.Fprintf(w, "  %s aggregate %s gtid %s committed %s: %s\n", p(m.ID), p(m.AggregateID), p(m.GTID), m.Commit.Format("2006-01-02 15:04:05Z"), p(m.Why))
	}
	more(w, len(r.Missing), r.MissingCount)
	fmt.Fprintf(w, "unexpected: %d\n", r.UnexpectedCount)
	for _, u := range r.Unexpected {
		fmt.Fprintf(w, "  %s\n", p(u))
	}
	more(w, len(r.Unexpected), r.UnexpectedCount)
	dups := slices.Sorted(func(yield func(string) bool) {
		for id := range r.Duplicates {
			if !yield(id) {
				return
			}
		}
	})
	fmt.Fprintf(w, "duplicates: %d (at-least-once delivery: not an error)\n", r.DuplicateCount)
	for _, id := range dups {
		fmt.Fprintf(w, "  %s ×%d\n", p(id), r.Duplicates[id])
	}
	more(w, len(dups), r.DuplicateCount)
	fmt.Fprintf(w, "order violations: %d\n", r.OrderCount)
	for _, o := range r.Order {
		fmt.Fprintf(w, "  %s\n", p(o))
	}
	more(w, len(r.Order), r.OrderCount)
	if r.Spill.Runs > 0 {
		fmt.Fprintf(w, "spilled: %d sorted runs, %.1f MiB (--memory was exceeded; the result is as exact)\n", r.Spill.Runs, float64(r.Spill.Bytes)/(1<<20))
	}
}

// more says how many findings were counted but not listed.
func more(w io.Writer, listed, count int) {
	if count > listed {
		fmt.Fprintf(w, "  … %d more (--list raises the limit)\n", count-listed)
	}
}

// auditWebhook audits webhook endpoints against their checkpoints and the
// dead-letter store, or against the receiver's list of ids.
func auditWebhook(ctx context.Context, cfg *config.Config, opts audit.Options, rc canal.Config, rng audit.Range, start, cur event.Position,
	flavor string, endpoints []string, receivedPath string) ([]audit.Report, error) {
	store, closeStore, err := checkpoint.OpenReadOnly(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	dl, closeDL, err := deadletter.OpenReadOnly(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeDL()
	opts.Memory /= int64(len(endpoints))
	hooks := make([]*audit.Webhook, len(endpoints))
	for i, name := range endpoints {
		cp, _, err := gateway.CursorOf(ctx, store, name) // without a cursor of its own: its sink's shared one
		found := err == nil
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			return nil, err
		}
		dead := map[string]string{}
		if dl != nil {
			recs, err := dl.List(ctx, deadletter.Filter{Sink: name})
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				if r.Event != nil {
					dead[r.Event.ID] = r.Reason
				}
			}
		}
		c := audit.NewComparison(opts)
		defer c.Close()
		hooks[i] = &audit.Webhook{Flavor: flavor, Checkpoint: cp, Found: found, Dead: dead, Listed: receivedPath != "", C: c,
			Selects: endpointFilter(cfg, name)}
	}
	span, err := audit.Scan(ctx, rc, rng, start, cur, func(ev audit.Event, e *event.Event, pos event.Position) error {
		for _, h := range hooks {
			if err := h.Event(ev, e, pos); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if receivedPath != "" {
		if err := readIDs(receivedPath, func(id string, n int64) error {
			for _, h := range hooks {
				if err := h.Received(id, n); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	var reports []audit.Report
	for i, h := range hooks {
		r, err := h.C.Report(ctx, endpoints[i], span)
		if err != nil {
			return nil, err
		}
		if receivedPath == "" {
			r.Notes = append([]string{audit.NoteWebhook}, r.Notes...)
		} else {
			r.Notes = append(r.Notes, "matched against the receiver's list "+receivedPath)
		}
		if n := h.Note(); n != "" {
			r.Notes = append(r.Notes, n)
		}
		reports = append(reports, r)
	}
	return reports, nil
}

// endpointFilter is the filter of the static endpoint of a fan-out (webhook) sink named
// "sink/endpoint" in cfg: what it selects (nil: every event).
func endpointFilter(cfg *config.Config, name string) func(*event.Event) bool {
	base, ep, _ := strings.Cut(name, "/")
	for _, s := range cfg.Sinks {
		if s.Name != base {
			continue
		}
		if fo, ok := gateway.FanOutFor(s); ok && fo.Filter != nil {
			return fo.Filter(s.Config, ep)
		}
	}
	return nil
}

// readIDs hands each id of path, one a line (blank lines ignored), to each,
// with its line number.
func readIDs(path string, each func(id string, line int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--received: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var n int64
	for sc.Scan() {
		n++
		if id := strings.TrimSpace(sc.Text()); id != "" {
			if err := each(id, n); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--received %s: %w", path, err)
	}
	return nil
}

// parseSize reads a size in bytes: a number with an optional binary unit
// (K, M, G, T; KB and KiB mean the same).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	shift, ok := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q", s, unit)
	}
	return int64(v * float64(uint64(1)<<shift)), nil
}
