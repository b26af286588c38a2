package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/printable"
)

// attemptsReadWait is how long the command waits for the attempts file
// before it asks the running relay instead.
const attemptsReadWait = time.Second

func attemptsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("attempts", `attempts --config FILE [--sink S] [--endpoint E] [--event ID] [--status N] [--failed]
                            [--since TIME] [--until TIME] [--tenant T] [--before ID] [--limit N] [--json] [--url URL]

Searches the record of webhook delivery attempts (attempts.enabled), newest first. With the
file store (checkpoint.store: file) while the relay runs, the relay holds the file: the command
then asks it over its HTTP listener (http.listen, or --url).`, stderr)
	var q attempts.Query
	fs.StringVar(&q.Sink, "sink", "", "only attempts of this webhook sink")
	fs.StringVar(&q.Endpoint, "endpoint", "", `only attempts of this endpoint (a name, or "sink/endpoint")`)
	fs.StringVar(&q.Tenant, "tenant", "", "only attempts of this tenant's endpoints")
	fs.StringVar(&q.EventID, "event", "", "only attempts of this event id")
	fs.IntVar(&q.Status, "status", 0, "only attempts answered with this HTTP status")
	fs.BoolVar(&q.Failed, "failed", false, "only attempts that did not deliver (retried or failed)")
	since := fs.String("since", "", "attempts started at or after (RFC 3339 or duration ago)")
	until := fs.String("until", "", "attempts started before (RFC 3339 or duration ago)")
	fs.Int64Var(&q.Before, "before", 0, "only attempts with an id below this one (the next page)")
	fs.IntVar(&q.Limit, "limit", attempts.DefaultLimit, fmt.Sprintf("most attempts printed (at most %d)", attempts.MaxLimit))
	asJSON := fs.Bool("json", false, "print attempts as JSON lines")
	url := fs.String("url", "", "ask the relay listening here (http://host:port) instead of opening the store")
	if err := parse(fs.FlagSet, args); err != nil {
		return err
	}
	var err error
	if q.Since, err = parseWhen(*since); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if q.Until, err = parseWhen(*until); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	if q.Limit < 1 || q.Limit > attempts.MaxLimit {
		return fmt.Errorf("--limit: %d: use 1 to %d", q.Limit, attempts.MaxLimit)
	}
	if s, e, ok := strings.Cut(q.Endpoint, "/"); ok && q.Sink == "" {
		q.Sink, q.Endpoint = s, e
	}
	var st attempts.Store
	if *url != "" {
		st = attempts.NewClient(*url, nil)
	} else {
		cfg, err := fs.load("checkpoint", "attempts", "http", "log")
		if err != nil {
			return err
		}
		if st, err = openAttemptsForReading(ctx, cfg); err != nil {
			return err
		}
		if !cfg.Attempts.Enabled {
			fmt.Fprintln(stderr, "note: attempts.enabled is false in this config: the relay records no attempts")
		}
	}
	defer st.Close()
	recs, err := st.Search(ctx, q)
	if err != nil {
		return err
	}
	return printAttempts(stdout, recs, *asJSON)
}

// openAttemptsForReading opens the configured record read-only, or, when
// the running relay holds its file, a client of the relay's listener.
func openAttemptsForReading(ctx context.Context, cfg *config.Config) (attempts.Store, error) {
	st, err := attempts.OpenReadOnly(ctx, cfg, attemptsReadWait)
	if !errors.Is(err, attempts.ErrLocked) {
		return st, err
	}
	if cfg.HTTP.Listen == "" {
		return nil, fmt.Errorf("%w; this config has no http.listen to ask the relay on: set http.listen (and restart the relay), or stop it", err)
	}
	return attempts.NewClient("http://"+localAddr(cfg.HTTP.Listen), nil), nil
}

// localAddr is the address to reach a listener at listen (":9090",
// "0.0.0.0:9090") from this host.
func localAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}

// printAttempts prints recs as a table, or as JSON lines. Receiver-
// controlled text (the answer, the error) has its control characters
// escaped.
func printAttempts(w io.Writer, recs []attempts.Record, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tENDPOINT\tEVENT\tATTEMPT\tRESULT\tOUTCOME\tDURATION\tANSWER")
	for _, r := range recs {
		result := fmt.Sprint(r.Status)
		if r.Status == 0 {
			result = r.Class
		}
		answer := string(r.Answer)
		if answer == "" && r.Failed() {
			answer = r.Error
		}
		answer = strings.Join(strings.Fields(answer), " ")
		if len(answer) > 80 {
			answer = answer[:77] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.Time.Format(time.RFC3339Nano), printable.String(r.Sink),
			printable.String(r.Endpoint), printable.String(r.EventID), r.Number, result, r.Outcome,
			r.Duration.Round(time.Microsecond), printable.String(strings.ToValidUTF8(answer, "?")))
	}
	return tw.Flush()
}
