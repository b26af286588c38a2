package webhook

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
)

// tableAdmin writes a webhook sink's endpoints table (gateway.TableAdmin):
// each row is checked by FromRow, as the relay reads it, before it is
// written.
type tableAdmin struct {
	tc     TableConfig
	static StaticNames
	db     *sql.DB
}

// admin returns the writer of sink's endpoints table on db, nil when the
// sink has none (gateway.FanOut.Admin).
func admin(sink string, sc config.SinkConfig, db *sql.DB) (gateway.TableAdmin, error) {
	wc, ok := sc.(*SinkConfig)
	if !ok {
		return nil, fmt.Errorf("webhook: section of sink %q is a %T, not a webhook section", sink, sc)
	}
	if wc.EndpointsTable == nil {
		return nil, nil
	}
	return &tableAdmin{tc: wc.EndpointsTable.WithDefaults(), static: NewStaticNames(wc.Endpoints), db: db}, nil
}

// badRow marks an error of the row as asked (gateway.ErrBadRow).
type badRow struct{ err error }

func (b badRow) Error() string   { return b.err.Error() }
func (b badRow) Unwrap() []error { return []error{gateway.ErrBadRow, b.err} }

// NewSecret returns a new random signing secret ("whsec_" and the base64 of
// 32 random bytes).
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}

func (ta *tableAdmin) quoted() string { return ta.tc.quoted() }

func (ta *tableAdmin) Rows(ctx context.Context) ([]gateway.TableRow, error) {
	raw, err := ta.tc.Rows(ctx, ta.db)
	return ta.views(raw, err)
}

// views is the admin's view of the raw rows a read returned, or its error.
func (ta *tableAdmin) views(raw []map[string]any, err error) ([]gateway.TableRow, error) {
	if err != nil {
		return nil, err
	}
	out := make([]gateway.TableRow, 0, len(raw))
	for _, r := range raw {
		out = append(out, ta.view(r))
	}
	return out, nil
}

// view is the admin's view of a raw row.
func (ta *tableAdmin) view(r map[string]any) gateway.TableRow {
	s := func(col string) string { v, _ := r[col].(string); return v }
	id, enabled := RowIdentity(r)
	row := gateway.TableRow{ID: id, URL: s("url"), Tenant: s("tenant"), Enabled: enabled,
		EventTypes: splitList(s("event_types")), AggregateTypes: splitList(s("aggregate_types")),
		Secrets: len(strings.Fields(s("secrets")))}
	if v, ok := r["rate_limit"].(float64); ok {
		row.RateLimit = &v
	}
	if _, err := ta.tc.fromRow(r); err != nil {
		row.Invalid = err.Error()
	} else if name, taken := ta.static.Taken(id); taken {
		row.Invalid = fmt.Sprintf("names the endpoint %q of the configuration: refused (rename the row)", name)
	}
	return row
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// raw reads row id as FromRow takes it, by its primary key.
func (ta *tableAdmin) raw(ctx context.Context, id string) (map[string]any, error) {
	r, ok, err := ta.tc.Row(ctx, ta.db, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a row of %s", gateway.ErrNoRow, id, ta.tc.Table)
	}
	return r, nil
}

func (ta *tableAdmin) Row(ctx context.Context, id string) (gateway.TableRow, error) {
	r, err := ta.raw(ctx, id)
	if err != nil {
		return gateway.TableRow{}, err
	}
	return ta.view(r), nil
}

// seal returns secret as the secrets column stores it for row: encrypted
// for it when the table has a key.
func (ta *tableAdmin) seal(secret, id, url string) (string, error) {
	if ta.tc.SecretsKey == "" {
		return secret, nil
	}
	return EncryptSecret(ta.tc.SecretsKey, secret, SecretRow{Table: ta.tc.Table, ID: id, URL: url})
}

// columns returns row as the columns FromRow reads, with secrets.
func columns(row gateway.TableRow, secrets string) map[string]any {
	opt := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	m := map[string]any{"id": row.ID, "url": row.URL, "secrets": opt(secrets), "tenant": opt(row.Tenant),
		"event_types": opt(strings.Join(row.EventTypes, ",")), "aggregate_types": opt(strings.Join(row.AggregateTypes, ",")),
		"rate_limit": nil, "enabled": int64(0)}
	if row.RateLimit != nil {
		m["rate_limit"] = *row.RateLimit
	}
	if row.Enabled {
		m["enabled"] = int64(1)
	}
	return m
}

// check validates the row as the relay would read it.
func (ta *tableAdmin) check(m map[string]any) error {
	id, _ := m["id"].(string)
	if name, taken := ta.static.Taken(id); taken {
		return badRow{fmt.Errorf("id %q names the endpoint %q of the configuration, and a row cannot take over an endpoint of the configuration: choose another id", id, name)}
	}
	if _, err := ta.tc.fromRow(m); err != nil {
		return badRow{err}
	}
	return nil
}

func (ta *tableAdmin) Insert(ctx context.Context, row gateway.TableRow, secret string) (string, error) {
	if err := ta.tc.CheckID(row.ID); err != nil {
		return "", badRow{err}
	}
	if secret == "" {
		secret = NewSecret()
	}
	if _, err := parseSecret(secret); err != nil {
		return "", badRow{fmt.Errorf("secret: %v", err)}
	}
	sealed, err := ta.seal(secret, row.ID, row.URL)
	if err != nil {
		return "", badRow{err}
	}
	m := columns(row, sealed)
	if err := ta.check(m); err != nil {
		return "", err
	}
	_, err = ta.db.ExecContext(ctx, "INSERT INTO "+ta.quoted()+" (id, url, secrets, tenant, event_types, aggregate_types, rate_limit, enabled) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		m["id"], m["url"], m["secrets"], m["tenant"], m["event_types"], m["aggregate_types"], m["rate_limit"], m["enabled"])
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return "", fmt.Errorf("%w: a row %q is in %s already; update it, or choose another id", gateway.ErrRowExists, row.ID, ta.tc.Table)
	}
	if err != nil {
		return "", ta.writeErr(err)
	}
	return secret, nil
}

// writeErr says what to grant when the relay's user may not write.
func (ta *tableAdmin) writeErr(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1142 || me.Number == 1143) {
		return fmt.Errorf("write %s: %s; GRANT INSERT, UPDATE, DELETE ON %s TO the relay's user to manage endpoints from the console", ta.tc.Table, me.Message, ta.tc.Table)
	}
	return fmt.Errorf("write %s: %w", ta.tc.Table, err)
}

func (ta *tableAdmin) Update(ctx context.Context, row gateway.TableRow) error {
	old, err := ta.raw(ctx, row.ID)
	if err != nil {
		return err
	}
	secrets, _ := old["secrets"].(string)
	if oldURL, _ := old["url"].(string); oldURL != row.URL && strings.Contains(secrets, encPrefix) {
		// An enc:v2 secret is bound to its row's url: seal it again.
		ep, err := ta.tc.fromRow(old)
		if err != nil {
			return badRow{fmt.Errorf("the row's secrets cannot be read to seal them for the new url (%v): rotate its secret first", err)}
		}
		var sealed []string
		for _, s := range ep.Config.Secrets {
			enc, err := ta.seal(s, row.ID, row.URL)
			if err != nil {
				return badRow{err}
			}
			sealed = append(sealed, enc)
		}
		secrets = strings.Join(sealed, " ")
	}
	row.Enabled, _ = rowEnabled(old["enabled"])
	m := columns(row, secrets)
	if err := ta.check(m); err != nil {
		return err
	}
	return ta.exec(ctx, row.ID, "UPDATE "+ta.quoted()+" SET url = ?, secrets = ?, tenant = ?, event_types = ?, aggregate_types = ?, rate_limit = ? WHERE id = ?",
		m["url"], m["secrets"], m["tenant"], m["event_types"], m["aggregate_types"], m["rate_limit"], row.ID)
}

// exec runs a statement on row id, which must exist.
func (ta *tableAdmin) exec(ctx context.Context, id, q string, args ...any) error {
	res, err := ta.db.ExecContext(ctx, q, args...)
	if err != nil {
		return ta.writeErr(err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		if _, err := ta.raw(ctx, id); err != nil {
			return err // gone meanwhile
		}
	}
	return nil
}

func (ta *tableAdmin) SetEnabled(ctx context.Context, id string, enabled bool) error {
	if _, err := ta.raw(ctx, id); err != nil {
		return err
	}
	v := 0
	if enabled {
		v = 1
	}
	return ta.exec(ctx, id, "UPDATE "+ta.quoted()+" SET enabled = ? WHERE id = ?", v, id)
}

func (ta *tableAdmin) Delete(ctx context.Context, id string) error {
	if _, err := ta.raw(ctx, id); err != nil {
		return err
	}
	return ta.exec(ctx, id, "DELETE FROM "+ta.quoted()+" WHERE id = ?", id)
}

func (ta *tableAdmin) RotateSecret(ctx context.Context, id string, keep bool) (string, error) {
	old, err := ta.raw(ctx, id)
	if err != nil {
		return "", err
	}
	url, _ := old["url"].(string)
	secret := NewSecret()
	sealed, err := ta.seal(secret, id, url)
	if err != nil {
		return "", badRow{err}
	}
	if prev, _ := old["secrets"].(string); keep && prev != "" {
		sealed += " " + prev
	}
	m := maps.Clone(old)
	m["secrets"] = sealed
	if err := ta.check(m); err != nil {
		return "", err
	}
	return secret, ta.exec(ctx, id, "UPDATE "+ta.quoted()+" SET secrets = ? WHERE id = ?", sealed, id)
}
