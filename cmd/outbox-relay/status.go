package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// statusCmd prints where every sink's checkpoint is, next to the server's
// current position: a quick answer to "how far behind is each sink?".
func statusCmd(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error {
	if err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	cfg, store, closeStore, err := fs.openCheckpointsReadOnly(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	var server, logs string
	var files []string
	var srcDB *sql.DB
	if db, err := source.Open(ctx, cfg.Source); err != nil {
		server = "unreachable: " + err.Error()
	} else {
		defer db.Close()
		srcDB = db
		info, err := source.Inspect(ctx, db, cfg.Source)
		if err == nil {
			var pos = mustPosition(source.CurrentPosition(ctx, db, info))
			server = pos
			all, _ := source.BinaryLogs(ctx, db)
			files = source.FileNames(all)
			if len(files) > 0 {
				logs = fmt.Sprintf("%s … %s (%d files)", files[0], files[len(files)-1], len(files))
			}
		} else {
			server = err.Error()
		}
	}
	// What the server and the store say is escaped: never interpreted by
	// the terminal.
	p := printable.String
	fmt.Fprintf(stdout, "source %s now at %s\n", p(srcName(cfg)), p(server))
	if logs != "" {
		fmt.Fprintf(stdout, "binary logs on the server: %s\n", p(logs))
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tCHECKPOINT\tSAVED\tBINLOG FILES AFTER IT")
	now := time.Now()
	names := cfg.PipelineNames()
	// The store may hold keys the config does not name (endpoints kept as
	// data, or removed from the config): they are listed after, marked.
	others, listErr := otherKeys(ctx, store, names)
	cps := map[string]checkpoint.Checkpoint{}
	for i, name := range append(names, others...) {
		label := p(name)
		if i >= len(names) {
			if inTable(cfg, name) {
				label += " (endpoints table)"
			} else {
				label += " (not in the config)"
			}
		}
		cp, shared, err := gateway.CursorOf(ctx, store, name)
		if shared {
			label += " (at its webhook sink's shared cursor)"
		}
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			fmt.Fprintf(tw, "%s\t(none: starts at checkpoint.start %s)\t-\t-\n", label, p(cfg.Checkpoint.Start))
		case err != nil:
			fmt.Fprintf(tw, "%s\t(error: %s)\t-\t-\n", label, p(err.Error()))
		default:
			cps[name] = cp
			if cp.Disabled != "" {
				label += " (disabled: " + p(cp.Disabled) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\n", label, p(cp.Position.String()), now.Sub(cp.UpdatedAt).Round(time.Second), p(behind(files, cp.Position.File)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if listErr != nil {
		fmt.Fprintf(stdout, "could not list the store's other checkpoints: %s\n", p(listErr.Error()))
	}
	// A webhook sink needs the binlog back to its oldest endpoint cursor.
	for _, sc := range cfg.Sinks {
		if _, ok := gateway.FanOutFor(sc); !ok {
			continue
		}
		n, off, oldest := 0, 0, ""
		for key, cp := range cps {
			if !strings.HasPrefix(key, sc.Name+"/") {
				continue
			}
			n++
			if cp.Disabled != "" {
				off++
			}
			if oldest == "" || cp.CommitTime.Before(cps[oldest].CommitTime) || cp.CommitTime.Equal(cps[oldest].CommitTime) && key < oldest {
				oldest = key
			}
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(stdout, "%s sink %s: %d endpoint cursors, %d disabled; the binlog must go back to its oldest, %s at %s (%s)\n",
			sc.Type, p(sc.Name), n, off, p(oldest), p(cps[oldest].Position.String()), p(behind(files, cps[oldest].Position.File)))
	}
	replayStatus(ctx, stdout, store, cfg)
	if srcDB != nil {
		tableStates(ctx, stdout, srcDB, cfg)
	}
	return nil
}

// replayStatus prints the replay jobs that are not over, with their
// progress, and how many are.
func replayStatus(ctx context.Context, stdout io.Writer, store checkpoint.Store, cfg *config.Config) {
	jobs, err := replay.NewStore(store)
	if err != nil {
		return
	}
	l, err := jobs.List(ctx)
	if err != nil {
		fmt.Fprintf(stdout, "replay jobs: %s\n", printable.String(err.Error()))
	}
	var spooled []replay.Spooled
	if cfg.Checkpoint.Store != "mysql" {
		spooled, _ = replay.SpoolFor(cfg.Checkpoint.Path).Take()
	}
	if len(l.Jobs) == 0 && len(spooled) == 0 {
		return
	}
	counts := map[replay.State]int{}
	for _, j := range l.Jobs {
		counts[j.State]++
	}
	fmt.Fprintf(stdout, "replay jobs: %d running, %d pending, %d requested, %d done, %d cancelled, %d failed, %d stopped (outbox-relay replay list shows them all)\n",
		counts[replay.Running], counts[replay.Pending], len(spooled), counts[replay.Done], counts[replay.Cancelled], counts[replay.Failed], counts[replay.Stopped])
	for _, j := range l.Jobs {
		if j.State.Final() {
			continue
		}
		at := "not started"
		if cp, ok := l.Progress[j.ID]; ok {
			at = "at " + cp.Position.String()
		}
		fmt.Fprintf(stdout, "  replay %s %s to %s: %d sent, %s, up to %s\n", j.ID, j.State, printable.String(j.Key()), j.Sent,
			printable.String(at), printable.String(j.Until.String()))
	}
}

// tableStates prints, for each sink whose kind keeps something in the
// source database (a webhook sink's endpoints table), what of it does not
// run (sink.Kind.Status).
func tableStates(ctx context.Context, stdout io.Writer, db *sql.DB, cfg *config.Config) {
	for _, sc := range cfg.Sinks {
		k, ok := sink.KindOf(sc.Type)
		if !ok || k.Status == nil {
			continue
		}
		for _, l := range k.Status(ctx, db, sc) {
			fmt.Fprintln(stdout, printable.String(l))
		}
	}
}

// otherKeys lists, sorted, the keys the store holds besides names.
func otherKeys(ctx context.Context, store checkpoint.Store, names []string) ([]string, error) {
	l, ok := store.(checkpoint.Lister)
	if !ok {
		return nil, nil
	}
	all, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		delete(all, n)
	}
	maps.DeleteFunc(all, func(k string, _ checkpoint.Checkpoint) bool { return checkpoint.Reserved(k) }) // replay jobs: listed apart
	return slices.Sorted(maps.Keys(all)), nil
}

func mustPosition(p interface{ String() string }, err error) string {
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return p.String()
}

// behind says how many binlog files are newer than file, or that file is gone.
func behind(files []string, file string) string {
	if len(files) == 0 || file == "" {
		return "?"
	}
	for i, f := range files {
		if f == file {
			return fmt.Sprint(len(files) - 1 - i)
		}
	}
	return "its file was purged: run outbox-relay check"
}

// srcName names the configured source server(s).
func srcName(cfg *config.Config) string {
	var names []string
	for _, a := range cfg.Source.Addrs() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// inTable reports whether key is under a fan-out sink with an endpoints table.
func inTable(cfg *config.Config, key string) bool {
	for _, s := range cfg.Sinks {
		if strings.HasPrefix(key, s.Name+"/") && gateway.HasTable(s) {
			return true
		}
	}
	return false
}

// checkpointSections are the sections a reader of the checkpoints needs: a
// sink's unset ${SECRET} does not stop it.
var checkpointSections = []string{"source", "tables", "checkpoint", "log"}

// openCheckpointsReadOnly loads the checkpointSections and opens the
// checkpoint store read-only; closeStore closes the store and its
// connection.
func (f configFlags) openCheckpointsReadOnly(ctx context.Context) (*config.Config, checkpoint.Store, func(), error) {
	cfg, err := f.load(checkpointSections...)
	if err != nil {
		return nil, nil, nil, err
	}
	store, closeConn, err := checkpoint.OpenReadOnly(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, store, func() { store.Close(); closeConn() }, nil
}
