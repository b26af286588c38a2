package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/prune"
)

// pruneCmd deletes the outbox rows every sink has acknowledged (or drops
// their partitions), once; prune.schedule makes the active relay do it.
func pruneCmd(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error {
	var olderThan, margin days
	fs.Var(&olderThan, "older-than", "retention: keep rows younger than this, acknowledged or not (e.g. 7d, 36h); default prune.older_than (7d)")
	fs.Var(&margin, "safety-margin", "taken off the oldest sink's acknowledged commit time; default prune.safety_margin (1h)")
	dry := fs.Bool("dry-run", false, "say what would be deleted and dropped, change nothing")
	batch := fs.Int("batch-size", 0, fmt.Sprintf("rows per DELETE; default prune.batch_size (%d)", config.DefaultPruneBatchSize))
	var rate count
	fs.Var(&rate, "rate", "max `rows` deleted per second (0: no cap beyond the pause); default prune.rate (0)")
	// prune reads the server, the tables and the checkpoints: a sink's unset
	// ${SECRET} does not stop it.
	cfg, err := fs.parseAndLoad(args, "source", "tables", "checkpoint", "prune", "log")
	if err != nil {
		return err
	}
	opts := prune.OptionsFrom(cfg.Prune)
	if olderThan.set {
		opts.OlderThan = olderThan.d
	}
	if margin.set {
		if margin.d < time.Second {
			return fmt.Errorf("--safety-margin %s: use at least 1s", margin.d)
		}
		opts.SafetyMargin = margin.d
	}
	if *batch > 0 {
		opts.BatchSize = min(*batch, 10000)
	}
	if rate.set {
		opts.Rate = rate.n
	}
	opts.DryRun = *dry
	opts.Logger = newLogger(cfg.Log, stderr)
	store, closeStore, err := checkpoint.OpenReadOnly(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	defer store.Close()
	db, info, err := prune.OpenPrimary(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := prune.NewFromConfig(db, info, store, cfg, opts).Run(ctx)
	printPrune(stdout, res, opts)
	return err
}

func printPrune(w io.Writer, res prune.Result, opts prune.Options) {
	p := printable.String
	h := res.Horizon
	if h.Now.IsZero() {
		return
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	}
	fmt.Fprintf(w, "server time %s; retention %s (rows before %s); safety margin %s\n", ts(h.Now), opts.OlderThan, ts(h.Retention), opts.SafetyMargin)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tACKNOWLEDGED UP TO\tCHECKPOINT")
	for _, s := range h.Sinks {
		acked := ts(s.Acked)
		switch {
		case s.CaughtUp:
			acked += " (caught up)"
		case s.Acked.IsZero():
			acked = "unknown: " + s.Why
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p(s.Name), p(acked), p(s.Checkpoint.Position.String()))
	}
	tw.Flush()
	if h.OpenTxnUnknown != "" {
		fmt.Fprintf(w, "WARN open transactions: %s\n", p(h.OpenTxnUnknown))
	}
	if h.Cutoff.IsZero() {
		fmt.Fprintf(w, "nothing may be pruned: held back by %s\n", p(h.HeldBy))
	} else {
		fmt.Fprintf(w, "cutoff %s, set by %s\n", ts(h.Cutoff), p(h.HeldBy))
	}
	verb := "deleted"
	if res.DryRun {
		verb = "would delete"
	}
	for _, t := range res.Tables {
		switch {
		case t.Mode == "partitions":
			fmt.Fprintf(w, "%s: partitions: %s %d (~%d rows) %s; created %s", p(t.Table), verb, len(t.Dropped), t.Rows, p(strings.Join(t.Dropped, ",")), p(strings.Join(t.Created, ",")))
		default:
			fmt.Fprintf(w, "%s: rows: %s %d", p(t.Table), verb, t.Rows)
		}
		if t.Skipped != "" {
			fmt.Fprintf(w, " (%s)", p(t.Skipped))
		}
		age := "-"
		if !t.Oldest.IsZero() {
			age = h.Now.Sub(t.Oldest).Round(time.Second).String()
		}
		fmt.Fprintf(w, "; now ~%d rows, %d bytes, oldest row %s old\n", t.TableRows, t.TableBytes, age)
	}
}

// days is a duration flag that also takes whole days ("7d").
// count is a flag's whole number of zero or more; unset, it prints no
// default (its default is the config's, which the flag's text names).
type count struct {
	n   int
	set bool
}

func (c *count) String() string {
	if c == nil || !c.set {
		return ""
	}
	return strconv.Itoa(c.n)
}

func (c *count) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: write a whole number, 0 or more", v)
	}
	c.n, c.set = n, true
	return nil
}

type days struct {
	d   time.Duration
	set bool
}

func (d *days) String() string { return d.d.String() }

func (d *days) Set(v string) error {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		x, err := strconv.Atoi(n)
		if err != nil || x < 0 {
			return fmt.Errorf("%q: write whole days (7d) or a duration (36h)", v)
		}
		d.d, d.set = time.Duration(x)*24*time.Hour, true
		return nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x < 0 {
		return fmt.Errorf("%q: write whole days (7d) or a duration (36h)", v)
	}
	d.d, d.set = x, true
	return nil
}
