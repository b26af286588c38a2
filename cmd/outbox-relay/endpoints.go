package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/printable"
)

// secretsKeyEnv holds the endpoints table's secrets key for `endpoints
// encrypt-secret` when --key-file is not given.
const secretsKeyEnv = "OUTBOX_RELAY_SECRETS_KEY"

// stdin is what commands read their input from; tests replace it.
var stdin io.Reader = os.Stdin

// endpointsUsage is `outbox-relay endpoints --help`, a format of
// secretsKeyEnv.
const endpointsUsage = `Usage: outbox-relay endpoints <add|update|delete|rotate-secret|enable|replay|encrypt-secret> [flags]

Helpers for webhook endpoints (of the configuration or of a table,
deploy/outbox_endpoints.sql).

  add             add a row to a webhook sink's endpoints table: --config FILE
                  SINK/ID --url URL [--tenant T] [--event-type T]...
                  [--aggregate-type T]... [--rate-limit N] [--disabled]
                  [--secret-file FILE]; prints its signing secret (a new random
                  one unless --secret-file). The row is checked as the relay reads
                  it and as the console checks it; a running relay applies it at
                  once

  update          change a row's url, tenant, filters or rate limit: --config FILE
                  SINK/ID and the flags of add to change (the others keep their
                  value; --event-type '' or --aggregate-type '' clears that filter,
                  --rate-limit '' sets the table's default)

  delete          remove a row: --config FILE SINK/ID

  rotate-secret   give a row a new random signing secret, printed: --config FILE
                  SINK/ID [--keep-old] (keep the old ones after it while receivers
                  switch)

                  These four write through the console's table writer, with its
                  checks, and log the console's audit line (component=cli,
                  who=cli:USER). An endpoint of the configuration is changed there.

  enable          enable endpoints disabled for failing too long
                  (webhook.gateway.disable_after): --config FILE SINK/ENDPOINT...;
                  each resumes from its cursor. A running relay notices within
                  seconds with a MySQL checkpoint store; with the file store, stop
                  the relay first (or UPDATE the endpoint's table row, which a
                  running relay applies at once)

  replay          send one endpoint what it was sent since a time, again
                  ("recover since"): --config FILE SINK/ENDPOINT --since TIME
                  [--until TIME] [--type GLOB]... [--dry-run]; the running relay
                  runs it beside the live stream, as outbox-relay replay does.
                  For an endpoint of the scaled-out gateway (outbox-relay gateway),
                  add --kafka SINK (and --topic T, --cursor-table TABLE as the
                  gateway has them): the window is read from the Kafka topics, and
                  one gateway replica runs it (outbox-relay replay list --gateway)

  encrypt-secret  read a signing secret ("whsec_...") on standard input and print it
                  encrypted for one row ("enc:v2:..."), for its secrets column:
                  --table SCHEMA.TABLE --id ID --url URL name the row (the table as
                  endpoints_table.table spells it, the row's id and url as stored); the
                  value decrypts only in that row, so encrypt again when the url
                  changes. An "enc:v1:..." value on standard input (made by older
                  versions, valid in any row) is encrypted again for the row. The key
                  (the base64 of 32 bytes, the sink's endpoints_table.secrets_key)
                  comes from $%s or --key-file FILE. --type TYPE names the sink type
                  whose table the row is in, needed only when several types have one
`

// endpointsCmd works on the webhook endpoints table's values.
func endpointsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := fmt.Sprintf(endpointsUsage, secretsKeyEnv)
	if help, err := verbHelp(args, usage, stdout, stderr); help {
		return err
	}
	switch args[0] {
	case "add", "update", "delete", "rotate-secret":
		return tableCmd(ctx, args[0], args[1:], stdout, stderr)
	}
	if args[0] == "enable" {
		return enableEndpoints(ctx, args[1:], stdout, stderr)
	}
	if args[0] == "replay" {
		return replayCreate(ctx, "endpoints replay", args[1:], "SINK/ENDPOINT", stdout, stderr)
	}
	if args[0] != "encrypt-secret" {
		return unknownVerb("endpoints", args[0], usage, stderr)
	}
	fs := newFlags("endpoints encrypt-secret", "endpoints encrypt-secret --table SCHEMA.TABLE --id ID --url URL [--key-file FILE] < secret.txt", stderr)
	keyFile := fs.String("key-file", "", "file holding the secrets key (base64 of 32 bytes); default: $"+secretsKeyEnv)
	var row gateway.SecretRow
	kind := fs.String("type", "", "the sink type whose endpoints table the row is in; default: the only one whose table holds encrypted secrets")
	fs.StringVar(&row.Table, "table", "", "the endpoints table, as endpoints_table.table spells it (schema.table)")
	fs.StringVar(&row.ID, "id", "", "the id of the row the secret is for")
	fs.StringVar(&row.URL, "url", "", "the url of the row, exactly as stored (the value decrypts only with it)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	var missing []string
	for _, f := range []struct{ flag, v string }{{"--table", row.Table}, {"--id", row.ID}, {"--url", row.URL}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("name the row the secret is for with %s: an encrypted secret decrypts only in its row (table, id and url)", strings.Join(missing, ", "))
	}
	key := os.Getenv(secretsKeyEnv)
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("read --key-file: %w", err)
		}
		key = string(b)
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return fmt.Errorf("no secrets key: set $%s or --key-file FILE to the base64 of 32 random bytes (make one with: head -c 32 /dev/urandom | base64), the value of the sink's endpoints_table.secrets_key", secretsKeyEnv)
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 64<<10))
	if err != nil {
		return fmt.Errorf("read the secret from standard input: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return errors.New("no secret on standard input: pipe it in, e.g. outbox-relay endpoints encrypt-secret < secret.txt")
	}
	if strings.ContainsAny(secret, " \t\r\n") {
		return errors.New("standard input holds more than one word: encrypt one secret at a time (the secrets column takes several, space-separated)")
	}
	encrypt, err := secretKind(*kind)
	if err != nil {
		return err
	}
	enc, err := encrypt(key, secret, row)
	if err != nil {
		return fmt.Errorf("encrypt the secret: %w", err)
	}
	fmt.Fprintln(stdout, enc)
	return nil
}

// secretKind returns how the fan-out kind named typ (or, when typ is
// empty, the only kind whose endpoints table holds encrypted secrets)
// encrypts a secret for a row.
func secretKind(typ string) (func(key, secret string, row gateway.SecretRow) (string, error), error) {
	kinds := gateway.SecretKinds()
	names := slices.Sorted(maps.Keys(kinds))
	if typ == "" && len(names) == 1 {
		typ = names[0]
	}
	if f := kinds[typ]; f != nil {
		return f, nil
	}
	if typ == "" {
		return nil, fmt.Errorf("pass --type with the sink type whose endpoints table the row is in: one of %s", strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("--type %q: no sink type of that name has an endpoints table with encrypted secrets; pass one of %s", typ, strings.Join(names, ", "))
}

// enableEndpoints clears the disabled flag of endpoints' checkpoints.
func enableEndpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("endpoints enable", "endpoints enable --config FILE SINK/ENDPOINT...", stderr)
	if err := parseFlags(fs.FlagSet, args); err != nil {
		return err
	}
	keys := fs.Args()
	if len(keys) == 0 {
		return fmt.Errorf("name the endpoints to enable, as SINK/ENDPOINT (outbox-relay status lists them): %w", errUsage)
	}
	cfg, err := fs.load()
	if err != nil {
		return err
	}
	if cfg.Checkpoint.Store != "mysql" {
		held, err := checkpoint.FileLockHeld(cfg.Checkpoint.Path)
		if err != nil {
			return err
		}
		if held {
			return fmt.Errorf("a running relay holds %s and would write its own copy over the change: stop it first, or UPDATE the endpoint's row in its endpoints table, or use checkpoint.store mysql (a running relay then notices within seconds)", cfg.Checkpoint.Path)
		}
	}
	store, closeStore, err := checkpoint.Open(ctx, cfg, newLogger(cfg.Log, stderr))
	if err != nil {
		return err
	}
	defer closeStore()
	defer store.Close()
	var errs []error
	for _, key := range keys {
		cp, err := store.Load(ctx, key)
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s has no checkpoint: check the name with outbox-relay status", printable.String(key)))
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case cp.Disabled == "":
			fmt.Fprintf(stdout, "%s is not disabled\n", printable.String(key))
			continue
		}
		cp.Disabled = ""
		cp.UpdatedAt = time.Now().UTC()
		if err := store.Save(ctx, key, cp); err != nil {
			errs = append(errs, fmt.Errorf("enable %s: %w", printable.String(key), err))
			continue
		}
		fmt.Fprintf(stdout, "%s enabled: it resumes from %s\n", printable.String(key), printable.String(cp.Position.String()))
	}
	return errors.Join(errs...)
}
