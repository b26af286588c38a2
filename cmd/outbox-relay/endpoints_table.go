package main

// endpoints add, update, delete and rotate-secret: an endpoints table's
// rows written through the sink's gateway.TableAdmin, the writer the
// console uses, with the console's checks and its audit line.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/source"
)

// rowFlags are the columns add and update set.
type rowFlags struct {
	url, tenant             string
	eventTypes, aggregTypes stringList
	rateLimit               string
}

func (r *rowFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "url", "", "the endpoint's url (https)")
	fs.StringVar(&r.tenant, "tenant", "", "the row's tenant (empty: an endpoint of every tenant)")
	fs.Var(&r.eventTypes, "event-type", "an event type the endpoint gets (repeat; a glob); none, or '': every type")
	fs.Var(&r.aggregTypes, "aggregate-type", "an aggregate type the endpoint gets (repeat; a glob); none, or '': every type")
	fs.StringVar(&r.rateLimit, "rate-limit", "", "attempts per second; empty: the table's default")
}

// apply sets on row the columns whose flags were given (all of them for a
// new row).
func (r *rowFlags) apply(fs *flag.FlagSet, row *gateway.TableRow) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "url":
			row.URL = r.url
		case "tenant":
			row.Tenant = r.tenant
		case "event-type":
			row.EventTypes = nonEmpty(r.eventTypes)
		case "aggregate-type":
			row.AggregateTypes = nonEmpty(r.aggregTypes)
		case "rate-limit":
			if r.rateLimit == "" {
				row.RateLimit = nil
				return
			}
			v, perr := strconv.ParseFloat(r.rateLimit, 64)
			if perr != nil || v <= 0 {
				err = fmt.Errorf("--rate-limit %q: give attempts per second, a number above 0 (or an empty value for the table's default)", r.rateLimit)
				return
			}
			row.RateLimit = &v
		}
	})
	return err
}

// nonEmpty is a repeated flag's values without the empty ones: given
// only as ”, the flag clears its column.
func nonEmpty(l stringList) []string {
	return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == "" })
}

// tableTarget is the endpoint a table command writes, with the sink's
// table.
type tableTarget struct {
	sink, id string
	table    gateway.TableAdmin
	static   []string
	audit    *slog.Logger
	who      string
	close    func()
}

// key is the endpoint's checkpoint key, "<sink>/<id>".
func (t tableTarget) key() string { return t.sink + "/" + t.id }

// refuseStatic refuses a change to an endpoint of the configuration, as
// the console does.
func (t tableTarget) refuseStatic() error {
	if slices.Contains(t.static, t.id) {
		return console.StaticError(t.key(), t.sink)
	}
	return nil
}

// done writes the audit line of action and returns err. Its tenant is the
// writer's, as the console's is: none, for an operator.
func (t tableTarget) done(action string, err error) error {
	console.Audit(t.audit, t.who, "", action, t.key(), err)
	return err
}

// openTable finds the sink of key ("SINK/ID") in the configuration at path
// and opens its endpoints table on the source server.
func openTable(ctx context.Context, fs configFlags, key string, stderr io.Writer) (tableTarget, error) {
	sinkName, id, ok := strings.Cut(key, "/")
	if !ok || sinkName == "" || id == "" {
		return tableTarget{}, fmt.Errorf("name the endpoint as SINK/ID (the webhook sink's name and the row's id), not %q", printable.String(key))
	}
	cfg, err := fs.load()
	if err != nil {
		return tableTarget{}, err
	}
	var sc config.Sink
	var fo gateway.FanOut
	var names []string
	for _, s := range cfg.Sinks {
		if f, fan := gateway.FanOutFor(s); fan {
			names = append(names, s.Name)
			if s.Name == sinkName {
				sc, fo = s, f
			}
		}
	}
	if sc.Name == "" {
		return tableTarget{}, fmt.Errorf("no webhook sink %q in %s: name one of %s", printable.String(sinkName), *fs.path, strings.Join(names, ", "))
	}
	if fo.Admin == nil {
		return tableTarget{}, fmt.Errorf("sink %q of type %s has no endpoints table to write", sc.Name, sc.Type)
	}
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		return tableTarget{}, err
	}
	table, err := fo.Admin(sc.Name, sc.Config, db)
	if err == nil && table == nil {
		err = fmt.Errorf("sink %q has no endpoints_table: its endpoints are in the configuration; add endpoints_table to its section to manage endpoints here", sc.Name)
	}
	if err != nil {
		db.Close()
		return tableTarget{}, err
	}
	t := tableTarget{sink: sc.Name, id: id, table: table, close: func() { db.Close() },
		audit: newLogger(cfg.Log, stderr).With(slog.String("component", "cli")), who: "cli:" + osUser()}
	if f, ok := sc.Config.(config.FanOut); ok {
		t.static = f.StaticEndpoints()
	}
	return t, nil
}

// osUser names who runs the command, for the audit line.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// tableCmd runs one of add, update, delete and rotate-secret.
func tableCmd(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	synopsis := map[string]string{
		"add":           "endpoints add --config FILE SINK/ID --url URL [--tenant T] [--event-type T]... [--aggregate-type T]... [--rate-limit N] [--disabled] [--secret-file FILE]",
		"update":        "endpoints update --config FILE SINK/ID [--url URL] [--tenant T] [--event-type T]... [--aggregate-type T]... [--rate-limit N]",
		"delete":        "endpoints delete --config FILE SINK/ID",
		"rotate-secret": "endpoints rotate-secret --config FILE SINK/ID [--keep-old]",
	}[verb]
	fs := newConfigFlags("endpoints "+verb, synopsis, stderr)
	var rf rowFlags
	var disabled, keepOld *bool
	var secretFile *string
	switch verb {
	case "add":
		rf.define(fs.FlagSet)
		disabled = fs.Bool("disabled", false, "add the row disabled (enable it with UPDATE or the console)")
		secretFile = fs.String("secret-file", "", `file holding the signing secret ("whsec_..."); default: a new random one, printed`)
	case "update":
		rf.define(fs.FlagSet)
	case "rotate-secret":
		keepOld = fs.Bool("keep-old", false, "keep the old secrets after the new one, so receivers verify either while they switch")
	}
	if err := parseFlags(fs.FlagSet, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) > 0 { // flags may follow the endpoint too
		if err := parseFlags(fs.FlagSet, rest[1:]); err != nil {
			return err
		}
	}
	if len(rest) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "name one endpoint, as SINK/ID (the webhook sink's name and the row's id)")
		fs.Usage()
		return errUsage
	}
	t, err := openTable(ctx, fs, rest[0], stderr)
	if err != nil {
		return err
	}
	defer t.close()

	switch verb {
	case "add":
		row := gateway.TableRow{ID: t.id, Enabled: !*disabled}
		if err := rf.apply(fs.FlagSet, &row); err != nil {
			return err
		}
		if row.URL == "" {
			return errors.New("give the endpoint's url with --url")
		}
		if err := console.CheckRowID(t.id, row.Tenant); err != nil {
			return err
		}
		secret, err := readSecretFile(*secretFile)
		if err != nil {
			return err
		}
		secret, err = t.table.Insert(ctx, row, secret)
		if err := t.done("create endpoint", err); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "%s added; its signing secret (shown once, give it to the receiver):\n", printable.String(t.key()))
		fmt.Fprintln(stdout, secret)
	case "update":
		if err := t.refuseStatic(); err != nil {
			return err
		}
		row, err := t.table.Row(ctx, t.id)
		if err != nil {
			return err
		}
		if err := rf.apply(fs.FlagSet, &row); err != nil {
			return err
		}
		if err := console.CheckRowID(t.id, row.Tenant); err != nil {
			return err
		}
		if err := t.done("update endpoint", t.table.Update(ctx, row)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s updated\n", printable.String(t.key()))
	case "delete":
		if err := t.refuseStatic(); err != nil {
			return err
		}
		if err := t.done("delete endpoint", t.table.Delete(ctx, t.id)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s deleted\n", printable.String(t.key()))
	case "rotate-secret":
		if err := t.refuseStatic(); err != nil {
			return err
		}
		secret, err := t.table.RotateSecret(ctx, t.id, *keepOld)
		if err := t.done("rotate secret", err); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "%s has a new signing secret (shown once, give it to the receiver):\n", printable.String(t.key()))
		fmt.Fprintln(stdout, secret)
	}
	return nil
}

// readSecretFile returns the signing secret in file ("" for none: the
// table makes a new one).
func readSecretFile(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read --secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" || strings.ContainsAny(secret, " \t\r\n") {
		return "", errors.New("--secret-file must hold one signing secret (\"whsec_...\"); leave it out for a new random one")
	}
	return secret, nil
}
