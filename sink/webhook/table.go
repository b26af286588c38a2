package webhook

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// EndpointsTableSchema creates the endpoints table (MariaDB 10.5+ and MySQL
// 8); deploy/outbox_endpoints.sql holds the same statement. Each row is one
// endpoint; see TableConfig.FromRow for how its columns are read.
const EndpointsTableSchema = `CREATE TABLE IF NOT EXISTS outbox_endpoints (
  id              VARCHAR(64)   NOT NULL PRIMARY KEY, -- the endpoint's stable name: letters, digits, '.', '_', '-'
  url             VARCHAR(2048) NOT NULL,             -- https address receiving the POSTs
  secrets         TEXT          NULL,                 -- space-separated; each "whsec_..." or "enc:v2:..." (outbox-relay endpoints encrypt-secret)
  tenant          VARCHAR(255)  NULL,                 -- set: only events whose tenant header (endpoints_table.tenant_header) equals it
  event_types     VARCHAR(1024) NULL,                 -- comma-separated globs on the event type; NULL: all
  aggregate_types VARCHAR(1024) NULL,                 -- comma-separated globs on the aggregate type; NULL: all
  rate_limit      DOUBLE        NULL,                 -- attempts per second; NULL: endpoints_table.defaults.rate_limit
  enabled         TINYINT(1)    NOT NULL DEFAULT 1,
  created_at      TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at      TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  KEY ix_tenant (tenant, id)                          -- a tenant's page of the console reads its own rows only
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// tableColumns are the columns FromRow reads, in Load's SELECT order.
var tableColumns = []string{"id", "url", "secrets", "tenant", "event_types", "aggregate_types", "rate_limit", "enabled"}

// encPrefix starts an encrypted secret: "enc:v2:" + base64(nonce ||
// AES-256-GCM ciphertext of the "whsec_..." string, sealed with its row as
// associated data), see EncryptSecret. encPrefixV1 starts the older form,
// sealed without associated data: it decrypts in any row it is copied to.
// It is still read, with a warning.
const (
	encPrefix   = "enc:v2:"
	encPrefixV1 = "enc:v1:"
)

// SecretRow is the row an encrypted secret belongs to. EncryptSecret seals
// the secret with it as associated data, so the value decrypts only in that
// row: copied into another row or table, or left in a row whose url has
// changed, it does not decrypt, and a row cannot borrow another endpoint's
// signing secret.
type SecretRow struct {
	// Table is the endpoints table, as endpoints_table.table spells it
	// ("shop.outbox_endpoints").
	Table string
	// ID is the row's id column.
	ID string
	// URL is the row's url column, exactly as stored.
	URL string
}

// associatedData encodes r unambiguously (each field length-prefixed).
func (r SecretRow) associatedData() []byte {
	b := []byte("outbox-relay endpoint secret v2")
	for _, f := range []string{r.Table, r.ID, r.URL} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// check says what is wrong with r, never quoting the url.
func (r SecretRow) check() error {
	switch {
	case !tableNameRe.MatchString(r.Table):
		return fmt.Errorf("table %q must be schema.table, as endpoints_table.table spells it", r.Table)
	case !endpointIDRe.MatchString(r.ID):
		return fmt.Errorf("id %q must be 1 to 64 letters, digits, '.', '_' or '-', the row's id", r.ID)
	case r.URL == "":
		return errors.New("the url is empty; give the row's url, exactly as stored")
	}
	return nil
}

// TableConfig configures endpoints kept as rows of a table in the source
// database (schema: EndpointsTableSchema) instead of, or besides, the
// configuration file.
//
// Zero values mean "use the default"; the defaults are applied in one place,
// WithDefaults, which Validate calls.
type TableConfig struct {
	// Table is the endpoints table as "schema.table". Required.
	Table string `yaml:"table" example:"shop.outbox_endpoints"`
	// TenantHeader is the event header (an outbox column configured as a
	// header) that holds the tenant: a row's tenant column keeps only the
	// events whose TenantHeader equals it. Required when a row sets
	// tenant. Default none.
	TenantHeader string `yaml:"tenant_header" example:"tenant"`
	// SecretsKey decrypts the rows' encrypted secrets ("enc:v2:...", and the
	// older "enc:v1:..."): the
	// base64 of 32 random bytes (AES-256). Required when a row has an
	// encrypted secret. It must reach the config from the environment or a
	// file, and is never logged. Default none.
	SecretsKey string `yaml:"secrets_key" secret:"true" example:"${OUTBOX_RELAY_SECRETS_KEY}"`
	// Defaults apply to every row's endpoint: timeout, max_concurrency,
	// rate_limit (for rows whose rate_limit is NULL), headers, body, retry,
	// egress. Name, url, secrets and filter come from each row and must not
	// be set here, nor headers that carry a credential (CredentialHeader):
	// they would go to whatever url a row names. Default: EndpointConfig's
	// defaults.
	Defaults EndpointConfig `yaml:"defaults"`

	// Logger, if set, receives the warnings about plain (unencrypted) and
	// enc:v1 (not bound to their row) secrets in the table, which never
	// include their values. It is not part of the YAML configuration.
	Logger *slog.Logger `yaml:"-"`

	// defaulted: WithDefaults has applied Defaults' defaults, so a row's
	// decode copies them instead of applying them again by reflection.
	defaulted bool
}

// TableEndpoint is one row of the endpoints table.
type TableEndpoint struct {
	// ID is the row's id, also Config.Name.
	ID string
	// Enabled is the row's enabled column: a disabled endpoint receives
	// nothing.
	Enabled bool
	// Config is the endpoint: TableConfig.Defaults with the row's url,
	// secrets (decrypted), filter and rate limit, FromData set.
	Config EndpointConfig
	// PlainSecrets says a secret of the row is stored plain ("whsec_"),
	// V1Secrets that one is an "enc:v1:" value, not bound to its row.
	PlainSecrets, V1Secrets bool
}

// WithDefaults returns tc with every zero field of Defaults set to its
// default.
func (tc TableConfig) WithDefaults() TableConfig {
	if tc.defaulted {
		return tc
	}
	tc.Defaults = tc.Defaults.WithDefaults()
	tc.defaulted = true
	return tc
}

// tableNameRe is one schema.table, each part an unquoted identifier.
var tableNameRe = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}\.[A-Za-z0-9_$]{1,64}$`)

// Validate checks the configuration with its defaults applied. Each error
// names the field (never a secret's value) and says how to fix it.
func (tc TableConfig) Validate() error {
	tc = tc.WithDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("endpoints_table: "+format, args...))
	}
	if !tableNameRe.MatchString(tc.Table) {
		bad("table %q must be schema.table (letters, digits, _ and $), e.g. shop.outbox_endpoints", tc.Table)
	}
	if tc.SecretsKey != "" {
		if _, err := secretsKey(tc.SecretsKey); err != nil {
			bad("secrets_key: %v", err)
		}
	}
	d := tc.Defaults
	if d.Name != "" {
		bad("defaults.name is set; each row's id names its endpoint: remove it")
	}
	if d.URL != "" {
		bad("defaults.url is set; each row has its url: remove it")
	}
	if len(d.Secrets) > 0 {
		bad("defaults.secrets is set; each row has its secrets: remove it")
	}
	if len(d.Filter.EventTypes) > 0 || len(d.Filter.AggregateTypes) > 0 || len(d.Filter.Headers) > 0 {
		bad("defaults.filter is set; each row has its filter (tenant, event_types, aggregate_types): remove it")
	}
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		if CredentialHeader(k) {
			bad("defaults.headers: %q carries a credential, and every row's url, which whoever writes the table chooses, would receive it; remove it: receivers authenticate the relay by the signature made with each row's secrets (a header credential belongs to a static endpoint, whose url is the configuration's)", k)
		}
	}
	// The rest is checked as an endpoint's would be, with a stand-in name
	// and url.
	d.Name, d.URL, d.Secrets, d.Filter, d.FromData = "defaults", "https://endpoint.example/", nil, Filter{}, true
	if err := d.Validate(); err != nil {
		bad("defaults: %v", err)
	}
	return errors.Join(errs...)
}

// LogValue renders the configuration without the key or header values.
func (tc TableConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("table", tc.Table),
		slog.String("tenant_header", tc.TenantHeader),
		slog.Bool("secrets_key_set", tc.SecretsKey != ""),
		slog.Any("defaults", tc.Defaults),
	)
}

// endpointIDRe is a valid id column.
var endpointIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// FromRow turns one row of the endpoints table into its endpoint. row is
// keyed by column name, with values as the reader (canal) normalizes them:
// nil for NULL, string for text, int64 for integers, float64 for DOUBLE.
// Every column of EndpointsTableSchema but created_at and updated_at must be
// present. The endpoint is validated (Config.Validate); an error names the
// row's id and the column, never a secret. A plain "whsec_" secret, and an
// "enc:v1:" one, are accepted, with a warning (without their values) to
// Logger.
func (tc TableConfig) FromRow(row map[string]any) (TableEndpoint, error) {
	ep, err := tc.fromRow(row)
	if err != nil {
		return TableEndpoint{}, err
	}
	tc.warnWeak([]TableEndpoint{ep})
	return ep, nil
}

// fromRow is FromRow without the warnings.
func (tc TableConfig) fromRow(row map[string]any) (TableEndpoint, error) {
	if !tc.defaulted {
		tc = tc.WithDefaults()
	}
	return tc.fromDefaulted(row)
}

// fromDefaulted is fromRow of a tc whose defaults are applied
// (WithDefaults): a load applies them once, not once a row.
func (tc TableConfig) fromDefaulted(row map[string]any) (TableEndpoint, error) {
	_, ep, err := tc.read(row)
	return ep, err
}

// read is fromDefaulted, with the row's columns (what is kept of it while
// its endpoint is idle).
func (tc TableConfig) read(row map[string]any) (rowColumns, TableEndpoint, error) {
	cols, err := tc.columnsOf(row)
	if err != nil {
		return cols, TableEndpoint{}, err
	}
	ep, err := tc.decode(cols)
	return cols, ep, err
}

// rowColumns are the columns of one row of the endpoints table as FromRow
// reads them, typed: what the kind keeps of an enabled row while its
// endpoint is idle (its strings as read, no map, no config), from which
// decode makes its endpoint again when it wakes.
type rowColumns struct {
	id, url, secrets, tenant, eventTypes, aggregateTypes string
	rate                                                 float64
	hasTenant, hasRate, enabled                          bool
}

// columnsOf reads the columns of row, checking each one's type and the id.
func (tc TableConfig) columnsOf(row map[string]any) (rowColumns, error) {
	for _, c := range tableColumns {
		if _, ok := row[c]; !ok {
			id, _ := row["id"].(string)
			return rowColumns{}, fmt.Errorf("endpoints table %s, row %q: no column %q; create the table with deploy/outbox_endpoints.sql (or add the column as it declares it)", tc.Table, id, c)
		}
	}
	id, ok := row["id"].(string)
	if !ok {
		return rowColumns{}, fmt.Errorf("endpoints table %s: a row's id is %s, not text; ids are VARCHAR(64) NOT NULL (deploy/outbox_endpoints.sql)", tc.Table, kind(row["id"]))
	}
	if err := tc.CheckID(id); err != nil {
		return rowColumns{}, err
	}
	bad := func(format string, args ...any) (rowColumns, error) {
		return rowColumns{}, fmt.Errorf("endpoints table %s, row %q: "+format, append([]any{tc.Table, id}, args...)...)
	}
	c := rowColumns{id: id}
	if c.url, ok = row["url"].(string); !ok || c.url == "" {
		return bad("url is %s; set it to the endpoint's https address", kind(row["url"]))
	}
	for _, f := range []struct {
		col string
		dst *string
	}{{"secrets", &c.secrets}, {"tenant", &c.tenant}, {"event_types", &c.eventTypes}, {"aggregate_types", &c.aggregateTypes}} {
		v, err := optString(row, f.col)
		if err != nil {
			return bad("%v", err)
		}
		*f.dst = v
	}
	c.hasTenant = row["tenant"] != nil
	switch v := row["rate_limit"].(type) {
	case nil:
	case float64:
		c.rate, c.hasRate = v, true
	case int64:
		c.rate, c.hasRate = float64(v), true
	default:
		return bad("rate_limit is %s, not a number", kind(v))
	}
	if c.enabled, ok = rowEnabled(row["enabled"]); !ok {
		return bad("enabled is %s; set 1 or 0", kind(row["enabled"]))
	}
	return c, nil
}

// decode makes the endpoint of a row's columns, with tc's defaults
// (applied: tc is WithDefaults'), and validates it without applying them
// again. An error names the row and the column, never a secret.
func (tc TableConfig) decode(c rowColumns) (TableEndpoint, error) {
	id := c.id
	bad := func(format string, args ...any) (TableEndpoint, error) {
		return TableEndpoint{}, fmt.Errorf("endpoints table %s, row %q: "+format, append([]any{tc.Table, id}, args...)...)
	}

	cfg := tc.Defaults
	cfg.Headers = maps.Clone(cfg.Headers)
	cfg.Egress.Allow = slices.Clone(cfg.Egress.Allow)
	cfg.Name, cfg.FromData, cfg.URL = id, true, c.url

	var (
		key       []byte
		plain, v1 bool
		err       error
	)
	for i, s := range strings.Fields(c.secrets) {
		prefix, enc, ok := encPrefix, "", false
		if enc, ok = strings.CutPrefix(s, encPrefix); !ok {
			prefix = encPrefixV1
			enc, ok = strings.CutPrefix(s, encPrefixV1)
		}
		if ok {
			if tc.SecretsKey == "" {
				return bad("secrets[%d] is encrypted (%s...) but endpoints_table.secrets_key is not set; set it to the key the secret was encrypted with (from the environment)", i, prefix)
			}
			if key == nil {
				if key, err = secretsKey(tc.SecretsKey); err != nil {
					return bad("endpoints_table.secrets_key: %v", err)
				}
			}
			var row *SecretRow
			if prefix == encPrefix {
				row = &SecretRow{Table: tc.Table, ID: id, URL: c.url}
			} else {
				v1 = true
			}
			if s, err = decryptSecret(key, enc, row); err != nil {
				return bad("secrets[%d]: %v", i, err)
			}
		} else {
			plain = true
		}
		if _, err := parseSecret(s); err != nil {
			return bad("secrets[%d]: %v", i, err)
		}
		cfg.Secrets = append(cfg.Secrets, s)
	}

	if c.hasTenant {
		switch {
		case c.tenant == "":
			return bad("tenant is empty; set NULL for an endpoint of every tenant, or the tenant's value")
		case tc.TenantHeader == "":
			return bad("tenant is set but endpoints_table.tenant_header is not; set tenant_header to the outbox header column that holds the tenant")
		}
		cfg.Filter.Headers = map[string]string{tc.TenantHeader: c.tenant}
		cfg.Tenant = c.tenant
	}
	cfg.Filter.EventTypes = splitList(c.eventTypes)
	cfg.Filter.AggregateTypes = splitList(c.aggregateTypes)

	if c.hasRate {
		cfg.RateLimit = c.rate
	}
	if math.IsNaN(cfg.RateLimit) || math.IsInf(cfg.RateLimit, 0) {
		return bad("rate_limit is not a finite number; set attempts per second, or NULL for the default")
	}

	if err := cfg.validate(); err != nil {
		return TableEndpoint{}, fmt.Errorf("endpoints table %s, row %q: %w", tc.Table, id, err)
	}
	return TableEndpoint{ID: id, Enabled: c.enabled, Config: cfg, PlainSecrets: plain, V1Secrets: v1}, nil
}

func rowEnabled(v any) (enabled, ok bool) {
	switch v := v.(type) {
	case int64:
		return v != 0, true
	case uint64:
		return v != 0, true
	case bool:
		return v, true
	}
	return false, false
}

// RowIdentity reads the id and enabled columns of a row as FromRow does,
// without the rest: what names the row's endpoint and says whether it
// should run, also for a row FromRow refuses. id is "" when the id is not
// text; an enabled column that is not 0 or 1 reads as enabled.
func RowIdentity(row map[string]any) (id string, enabled bool) {
	id, _ = row["id"].(string)
	enabled, ok := rowEnabled(row["enabled"])
	return id, enabled || !ok
}

// optString reads a nullable text column: "" for NULL.
func optString(row map[string]any, col string) (string, error) {
	switch v := row[col].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("%s is %s, not text", col, kind(v))
	}
}

// kind names what a column held, for an error, never the value (it may be
// a secret). It is called for a string only when the string is empty.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "NULL"
	case string:
		return "empty"
	case int64, uint64:
		return "an integer"
	case float64:
		return "a number"
	}
	return fmt.Sprintf("of type %T", v)
}

// warnWeak warns, once each, of the rows with plain secrets and of those
// with enc:v1 ones.
func (tc TableConfig) warnWeak(eps []TableEndpoint) {
	if tc.Logger == nil {
		return
	}
	var plain, v1 []string
	for _, ep := range eps {
		if ep.PlainSecrets {
			plain = append(plain, ep.ID)
		}
		if ep.V1Secrets {
			v1 = append(v1, ep.ID)
		}
	}
	if len(plain) > 0 {
		tc.Logger.Warn("webhook endpoints table holds plain secrets: anyone who can read the table can sign as the relay; encrypt them with `outbox-relay endpoints encrypt-secret --table TABLE --id ID --url URL` and set endpoints_table.secrets_key",
			slog.String("table", tc.Table), slog.Any("endpoints", plain))
	}
	if len(v1) > 0 {
		tc.Logger.Warn("webhook endpoints table holds enc:v1 secrets, which are not bound to their row: copied into another row, they decrypt there and sign its requests; pipe each through `outbox-relay endpoints encrypt-secret --table TABLE --id ID --url URL` (it takes an enc:v1 value too) and store the enc:v2 value it prints",
			slog.String("table", tc.Table), slog.Any("endpoints", v1))
	}
}

// RowError is a row of the endpoints table that cannot be used (FromRow
// refuses it). Its endpoint is invalid: it is skipped, the others run.
type RowError struct {
	// ID is the row's id ("" when the id itself is unusable).
	ID  string
	Err error // names the table, the row and the column
}

func (e *RowError) Error() string { return e.Err.Error() }

// RowIDs returns the ids of rows, in their order.
func RowIDs(rows []TableEndpoint) []string {
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// BadRowIDs returns the ids of bad, in their order ("" for a row whose id
// itself is unusable).
func BadRowIDs(bad []*RowError) []string {
	ids := make([]string, 0, len(bad))
	for _, b := range bad {
		ids = append(ids, b.ID)
	}
	return ids
}
func (e *RowError) Unwrap() error { return e.Err }

// Load reads every row of the endpoints table, enabled or not, ordered by
// id: the usable ones as endpoints, the others as bad, each with why
// (every bad row is named: an endpoint is never skipped silently). err is
// for the table itself: missing, not granted, unreadable. Plain secrets are
// reported in one warning naming their rows. The table is read a page at
// a time, as EachRow does.
func (tc TableConfig) Load(ctx context.Context, db *sql.DB) (rows []TableEndpoint, bad []*RowError, err error) {
	tc = tc.WithDefaults() // once, not once a row
	err = tc.EachRow(ctx, db, func(row map[string]any) error {
		ep, err := tc.fromDefaulted(row)
		if err != nil {
			id, _ := row["id"].(string)
			bad = append(bad, &RowError{ID: id, Err: err})
			return nil
		}
		rows = append(rows, ep)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	tc.warnWeak(rows)
	return rows, bad, nil
}

// Rows reads every row of the endpoints table as FromRow takes them,
// ordered by id, as EachRow does. err is for the table itself: missing,
// not granted, unreadable.
func (tc TableConfig) Rows(ctx context.Context, db *sql.DB) ([]map[string]any, error) {
	var out []map[string]any
	err := tc.EachRow(ctx, db, func(row map[string]any) error {
		out = append(out, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// tablePage is how many rows one query of EachRow reads.
var tablePage = 1000

// EachRow calls fn with every row of the endpoints table as FromRow takes
// it, in id order, then returns: the table is read by primary key a page
// at a time (SELECT ... WHERE id > ? ORDER BY id LIMIT 1000), so that a
// table of any size holds one page of raw rows in memory, never the whole
// result. The pages are read in one read-only REPEATABLE READ transaction:
// they are one snapshot of the table, as a single SELECT would be, and a
// row inserted, renamed or deleted while they are read is seen as it was
// at the first page (every row exactly once). An error of fn ends the read
// and is returned; any other error is for the table itself: missing, not
// granted, unreadable.
func (tc TableConfig) EachRow(ctx context.Context, db *sql.DB, fn func(row map[string]any) error) error {
	if !tableNameRe.MatchString(tc.Table) {
		return fmt.Errorf("endpoints_table: table %q must be schema.table, e.g. shop.outbox_endpoints", tc.Table)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to undo
	first := fmt.Sprintf("SELECT %s FROM %s ORDER BY id LIMIT %d", strings.Join(tableColumns, ", "), tc.quoted(), tablePage)
	next := fmt.Sprintf("SELECT %s FROM %s WHERE id > ? ORDER BY id LIMIT %d", strings.Join(tableColumns, ", "), tc.quoted(), tablePage)
	var after any // the last id read; nil before the first page
	for {
		q, args := first, []any(nil)
		if after != nil {
			q, args = next, []any{after}
		}
		n, last, err := tc.page(ctx, tx, q, args, fn)
		if err != nil {
			return err
		}
		if n < tablePage {
			return nil
		}
		after = last
	}
}

// page reads one page of EachRow: the rows of q, each handed to fn. It
// returns how many it read and the last one's id as read.
func (tc TableConfig) page(ctx context.Context, tx *sql.Tx, q string, args []any, fn func(map[string]any) error) (n int, last any, err error) {
	res, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, nil, tc.readErr(err)
	}
	defer res.Close()
	for res.Next() {
		row, id, err := scanRow(res)
		if err != nil {
			return n, nil, fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
		}
		n++
		last = id
		if err := fn(row); err != nil {
			return n, nil, err
		}
	}
	if err := res.Err(); err != nil {
		return n, nil, fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
	}
	return n, last, nil
}

// Row reads the row of the endpoints table whose id is id, byte for byte,
// by its primary key (SELECT ... WHERE id = ?): one row read, whatever the
// table's size. ok is false when there is none (an id equal to it only in
// the table's collation, "ACME" for "acme", is another row's). err is for
// the table itself.
func (tc TableConfig) Row(ctx context.Context, db *sql.DB, id string) (row map[string]any, ok bool, err error) {
	if !tableNameRe.MatchString(tc.Table) {
		return nil, false, fmt.Errorf("endpoints_table: table %q must be schema.table, e.g. shop.outbox_endpoints", tc.Table)
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE id = ?", strings.Join(tableColumns, ", "), tc.quoted())
	res, err := db.QueryContext(ctx, q, id)
	if err != nil {
		return nil, false, tc.readErr(err)
	}
	defer res.Close()
	for res.Next() {
		r, rid, err := scanRow(res)
		if err != nil {
			return nil, false, fmt.Errorf("read webhook endpoint %q from %s: %w", id, tc.Table, err)
		}
		if rid == id {
			row, ok = r, true
		}
	}
	if err := res.Err(); err != nil {
		return nil, false, fmt.Errorf("read webhook endpoint %q from %s: %w", id, tc.Table, err)
	}
	return row, ok, nil
}

// quoted is the table as a statement names it.
func (tc TableConfig) quoted() string {
	schema, name, _ := strings.Cut(tc.Table, ".")
	return fmt.Sprintf("`%s`.`%s`", schema, name)
}

// readErr says what an error reading the table means and how to fix it.
func (tc TableConfig) readErr(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1146: // ER_NO_SUCH_TABLE
			return fmt.Errorf("read webhook endpoints: table %s does not exist; create it with deploy/outbox_endpoints.sql", tc.Table)
		case 1054: // ER_BAD_FIELD_ERROR
			return fmt.Errorf("read webhook endpoints from %s: %s; the table must have the columns of deploy/outbox_endpoints.sql", tc.Table, me.Message)
		case 1142, 1143: // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR
			return fmt.Errorf("read webhook endpoints from %s: %s; GRANT SELECT ON %s TO the relay's user", tc.Table, me.Message, tc.Table)
		}
	}
	return fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
}

// scanRow reads the current row of res (the columns of tableColumns) as
// FromRow takes it, and its id as read (nil for NULL).
func scanRow(res *sql.Rows) (map[string]any, any, error) {
	var (
		id, url, secrets, tenant, eventTypes, aggTypes sql.NullString
		rate                                           sql.NullFloat64
		enabled                                        sql.NullInt64
	)
	if err := res.Scan(&id, &url, &secrets, &tenant, &eventTypes, &aggTypes, &rate, &enabled); err != nil {
		return nil, nil, err
	}
	row := map[string]any{
		"id": nullable(id), "url": nullable(url), "secrets": nullable(secrets), "tenant": nullable(tenant),
		"event_types": nullable(eventTypes), "aggregate_types": nullable(aggTypes),
		"rate_limit": nil, "enabled": nil,
	}
	if rate.Valid {
		row["rate_limit"] = rate.Float64
	}
	if enabled.Valid {
		row["enabled"] = enabled.Int64
	}
	return row, row["id"], nil
}

func nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

// secretsKey decodes TableConfig.SecretsKey. Errors never contain it.
func secretsKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not valid base64; generate a key with: head -c 32 /dev/urandom | base64")
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("decodes to %d bytes, not 32 (AES-256); generate a key with: head -c 32 /dev/urandom | base64", len(key))
	}
	return key, nil
}

// EncryptSecret encrypts a webhook signing secret ("whsec_...") for the
// secrets column of the endpoints table's row with key
// (TableConfig.SecretsKey: the base64 of 32 bytes): "enc:v2:" +
// base64(nonce || AES-256-GCM ciphertext), with row as associated data, so
// that it decrypts only in that row (SecretRow). secret may also be an
// "enc:v1:" value encrypted with key, which is decrypted and encrypted
// again for row. Errors never contain the secret or the key.
func EncryptSecret(key, secret string, row SecretRow) (string, error) {
	k, err := secretsKey(key)
	if err != nil {
		return "", fmt.Errorf("secrets key: %v", err)
	}
	if err := row.check(); err != nil {
		return "", fmt.Errorf("row: %v", err)
	}
	if enc, ok := strings.CutPrefix(secret, encPrefixV1); ok {
		if secret, err = decryptSecret(k, enc, nil); err != nil {
			return "", err
		}
	}
	if _, err := parseSecret(secret); err != nil {
		return "", err
	}
	aead, err := newAEAD(k)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return encPrefix + base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(secret), row.associatedData())), nil
}

// decryptSecret decrypts the base64 after "enc:v2:", sealed for row, or,
// with row nil, after "enc:v1:". Errors never contain the value.
func decryptSecret(key []byte, enc string, row *SecretRow) (string, error) {
	prefix, ad := encPrefixV1, []byte(nil)
	if row != nil {
		prefix, ad = encPrefix, row.associatedData()
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("the value after %q is not valid base64; encrypt the secret again with `outbox-relay endpoints encrypt-secret`", prefix)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	if len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", fmt.Errorf("the value after %q is too short to be an encrypted secret; encrypt the secret again with `outbox-relay endpoints encrypt-secret`", prefix)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], ad)
	switch {
	case err != nil && row != nil:
		return "", fmt.Errorf("cannot be decrypted with endpoints_table.secrets_key for this row (another key, a damaged value, or a value encrypted for another table, id or url: an enc:v2 secret is bound to its row, so a changed url needs its secrets encrypted again); set the key it was encrypted with, or encrypt the secret again with `outbox-relay endpoints encrypt-secret --table %s --id %s --url URL`", row.Table, row.ID)
	case err != nil:
		return "", errors.New("cannot be decrypted with endpoints_table.secrets_key (another key, or a damaged value); set the key it was encrypted with, or encrypt the secret again with `outbox-relay endpoints encrypt-secret --table TABLE --id ID --url URL`")
	}
	return string(plain), nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
