package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

var (
	testKey  = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	otherKey = base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
)

// goodSecretRow is the row goodRow is, in TestFromRow's table.
var goodSecretRow = SecretRow{Table: "shop.outbox_endpoints", ID: "acme-orders", URL: "https://hooks.acme.example/in"}

// encrypt encrypts secret for goodRow.
func encrypt(t *testing.T, key, secret string) string {
	t.Helper()
	return encryptFor(t, key, secret, goodSecretRow)
}

func encryptFor(t *testing.T, key, secret string, row SecretRow) string {
	t.Helper()
	v, err := EncryptSecret(key, secret, row)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// goodRow is a valid row as canal hands it on.
func goodRow() map[string]any {
	return map[string]any{
		"id": "acme-orders", "url": "https://hooks.acme.example/in", "secrets": nil, "tenant": nil,
		"event_types": nil, "aggregate_types": nil, "rate_limit": nil, "enabled": int64(1),
		"created_at": "2024-05-06 07:08:09.000000", "updated_at": "2024-05-06 07:08:09.000000",
	}
}

func TestFromRow(t *testing.T) {
	encSpec := encrypt(t, testKey, specSecret)
	tc := TableConfig{Table: "shop.outbox_endpoints", TenantHeader: "tenant", SecretsKey: testKey,
		Defaults: EndpointConfig{Timeout: 3e9, RateLimit: 7, Headers: map[string]string{"Authorization": "Bearer x"}}}
	tests := []struct {
		name   string
		tc     func(*TableConfig)
		modify func(map[string]any)
		check  func(t *testing.T, ep TableEndpoint)
		want   string // error text; "" means valid
	}{
		{"a minimal row takes the defaults", nil, nil, func(t *testing.T, ep TableEndpoint) {
			c := ep.Config
			if ep.ID != "acme-orders" || !ep.Enabled || c.Name != "acme-orders" || c.URL != "https://hooks.acme.example/in" || !c.FromData {
				t.Errorf("endpoint %+v", ep)
			}
			if c.Timeout != 3e9 || c.RateLimit != 7 || c.MaxConcurrency != 16 || c.Headers["Authorization"] != "Bearer x" {
				t.Errorf("defaults not applied: %+v", c)
			}
			if len(c.Secrets) != 0 || len(c.Filter.EventTypes) != 0 || len(c.Filter.AggregateTypes) != 0 || len(c.Filter.Headers) != 0 {
				t.Errorf("a NULL secrets/filter row has secrets or a filter: %+v", c)
			}
		}, ""},
		{"a full row", nil, func(r map[string]any) {
			r["secrets"] = specSecret + "  " + encrypt(t, testKey, rotatedSecret)
			r["tenant"] = "acme"
			r["event_types"] = "order.*, invoice.paid,"
			r["aggregate_types"] = "order"
			r["rate_limit"] = 2.5
			r["enabled"] = int64(0)
		}, func(t *testing.T, ep TableEndpoint) {
			c := ep.Config
			if ep.Enabled {
				t.Error("enabled 0 reads as enabled")
			}
			if !slices.Equal(c.Secrets, []string{specSecret, rotatedSecret}) {
				t.Errorf("secrets were not read (or decrypted) in order")
			}
			if c.Filter.Headers["tenant"] != "acme" || len(c.Filter.Headers) != 1 {
				t.Errorf("tenant filter %v", c.Filter.Headers)
			}
			if c.Tenant != "acme" {
				t.Errorf("tenant %q, want acme (what the attempts record says of it)", c.Tenant)
			}
			if !slices.Equal(c.Filter.EventTypes, []string{"order.*", "invoice.paid"}) || !slices.Equal(c.Filter.AggregateTypes, []string{"order"}) {
				t.Errorf("filter %+v", c.Filter)
			}
			if c.RateLimit != 2.5 {
				t.Errorf("rate limit %g", c.RateLimit)
			}
		}, ""},
		{"an integer rate limit is accepted", nil, func(r map[string]any) { r["rate_limit"] = int64(3) },
			func(t *testing.T, ep TableEndpoint) {
				if ep.Config.RateLimit != 3 {
					t.Errorf("rate limit %g", ep.Config.RateLimit)
				}
			}, ""},
		{"the defaults' headers are not shared between rows", nil, nil, func(t *testing.T, ep TableEndpoint) {
			ep.Config.Headers["Authorization"] = "changed"
			if tc.Defaults.Headers["Authorization"] != "Bearer x" {
				t.Error("changing a row's headers changed the defaults")
			}
		}, ""},
		{"a missing column", nil, func(r map[string]any) { delete(r, "enabled") }, nil, `no column "enabled"; create the table with deploy/outbox_endpoints.sql`},
		{"a NULL id", nil, func(r map[string]any) { r["id"] = nil }, nil, "a row's id is NULL"},
		{"an id with a slash", nil, func(r map[string]any) { r["id"] = "a/b" }, nil, `row "a/b": the id must be 1 to 64 letters, digits`},
		{"an id with a space", nil, func(r map[string]any) { r["id"] = "a b" }, nil, "the id must be"},
		{"an empty url", nil, func(r map[string]any) { r["url"] = "" }, nil, `row "acme-orders": url is empty`},
		{"a NULL url", nil, func(r map[string]any) { r["url"] = nil }, nil, "url is NULL"},
		{"a relative url", nil, func(r map[string]any) { r["url"] = "/in" }, nil, "not an absolute http or https address"},
		{"a private address is refused (the url comes from data)", nil, func(r map[string]any) { r["url"] = "http://10.0.0.7/in" }, nil, "10.0.0.7"},
		{"a private address allowed by the defaults' egress", func(c *TableConfig) { c.Defaults.Egress.Allow = []string{"10.0.0.0/8"} },
			func(r map[string]any) { r["url"] = "http://10.0.0.7/in" }, nil, ""},
		{"a secret that is not whsec_", nil, func(r map[string]any) { r["secrets"] = "hunter2hunter2" }, nil, `secrets[0]: secret does not start with "whsec_"`},
		{"a short plain secret", nil, func(r map[string]any) {
			r["secrets"] = specSecret + " whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))
		}, nil, "secrets[1]: secret decodes to 5 bytes"},
		{"an encrypted secret with the wrong key", func(c *TableConfig) { c.SecretsKey = otherKey },
			func(r map[string]any) { r["secrets"] = encSpec }, nil, "secrets[0]: cannot be decrypted with endpoints_table.secrets_key"},
		{"an encrypted secret without a key", func(c *TableConfig) { c.SecretsKey = "" },
			func(r map[string]any) { r["secrets"] = encSpec }, nil, "secrets[0] is encrypted (enc:v2:...) but endpoints_table.secrets_key is not set"},
		{"a damaged encrypted secret", nil, func(r map[string]any) { r["secrets"] = encSpec[:len(encSpec)-8] + "AAAAAAAA" }, nil, "cannot be decrypted"},
		{"an encrypted value that is not base64", nil, func(r map[string]any) { r["secrets"] = "enc:v2:***" }, nil, `the value after "enc:v2:" is not valid base64`},
		{"a truncated encrypted value", nil, func(r map[string]any) { r["secrets"] = "enc:v2:AAAA" }, nil, "too short"},
		{"an enc:v1 value that is not base64", nil, func(r map[string]any) { r["secrets"] = "enc:v1:***" }, nil, `the value after "enc:v1:" is not valid base64`},
		{"an enc:v1 secret is still read", nil, func(r map[string]any) { r["secrets"] = encryptV1(t, testKey, specSecret) },
			func(t *testing.T, ep TableEndpoint) {
				if !slices.Equal(ep.Config.Secrets, []string{specSecret}) {
					t.Error("an enc:v1 secret was not decrypted")
				}
			}, ""},
		{"a secret encrypted for another row does not decrypt", nil, func(r map[string]any) {
			r["secrets"] = encryptFor(t, testKey, specSecret, SecretRow{Table: "shop.outbox_endpoints", ID: "victim", URL: "https://hooks.acme.example/in"})
		}, nil, "secrets[0]: cannot be decrypted with endpoints_table.secrets_key for this row"},
		{"a secret encrypted for another url does not decrypt", nil, func(r map[string]any) {
			r["secrets"] = encryptFor(t, testKey, specSecret, SecretRow{Table: "shop.outbox_endpoints", ID: "acme-orders", URL: "https://victim.example/in"})
		}, nil, "a value encrypted for another table, id or url"},
		{"a secret encrypted for another table does not decrypt", nil, func(r map[string]any) {
			r["secrets"] = encryptFor(t, testKey, specSecret, SecretRow{Table: "other.outbox_endpoints", ID: "acme-orders", URL: "https://hooks.acme.example/in"})
		}, nil, "encrypt-secret --table shop.outbox_endpoints --id acme-orders --url URL"},
		{"an encrypted value that is not a whsec_ secret", nil, func(r map[string]any) {
			r["secrets"] = encryptRaw(t, testKey, "not-a-webhook-secret")
		}, nil, `secrets[0]: secret does not start with "whsec_"`},
		{"secrets that are not text", nil, func(r map[string]any) { r["secrets"] = int64(5) }, nil, "secrets is an integer, not text"},
		{"a tenant without tenant_header", func(c *TableConfig) { c.TenantHeader = "" },
			func(r map[string]any) { r["tenant"] = "acme" }, nil, "tenant is set but endpoints_table.tenant_header is not"},
		{"an empty tenant", nil, func(r map[string]any) { r["tenant"] = "" }, nil, "tenant is empty; set NULL"},
		{"a bad event type glob", nil, func(r map[string]any) { r["event_types"] = "order.[a" }, nil, `filter.event_types[0] "order.[a" is not a valid glob`},
		{"a bad aggregate type glob", nil, func(r map[string]any) { r["aggregate_types"] = "a,[" }, nil, "filter.aggregate_types[1]"},
		{"a negative rate limit", nil, func(r map[string]any) { r["rate_limit"] = -1.0 }, nil, "rate_limit -1 is negative"},
		{"a rate limit that is text", nil, func(r map[string]any) { r["rate_limit"] = "fast" }, nil, "rate_limit is empty, not a number"},
		{"a NULL enabled", nil, func(r map[string]any) { r["enabled"] = nil }, nil, "enabled is NULL; set 1 or 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tc
			c.Defaults.Headers = map[string]string{"Authorization": "Bearer x"}
			tc.Defaults.Headers = c.Defaults.Headers
			if tt.tc != nil {
				tt.tc(&c)
			}
			row := goodRow()
			if tt.modify != nil {
				tt.modify(row)
			}
			ep, err := c.FromRow(row)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("FromRow = %v, want nil", err)
				}
				if tt.check != nil {
					tt.check(t, ep)
				}
				if _, err := NewEndpoint(ep.Config, nil); err != nil {
					t.Fatalf("NewEndpoint refused the row's config: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromRow = %v, want an error containing %q", err, tt.want)
			}
			if id, _ := row["id"].(string); id != "" && !strings.Contains(err.Error(), id) {
				t.Errorf("the error does not name the row %q: %v", id, err)
			}
			for _, secret := range []string{specSecret[len("whsec_"):], rotatedSecret[len("whsec_"):], testKey, otherKey, "hunter2", encSpec[len(encPrefix):], "https://hooks.acme.example/in"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error quotes a secret or key: %v", err)
				}
			}
		})
	}
}

// encryptV1 encrypts s as versions before enc:v2 did: with no associated
// data.
func encryptV1(t *testing.T, key, s string) string {
	t.Helper()
	k, err := secretsKey(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := newAEAD(k)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	return encPrefixV1 + base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(s), nil))
}

// encryptRaw encrypts any string for goodRow, as EncryptSecret does for
// whsec_ ones.
func encryptRaw(t *testing.T, key, s string) string {
	t.Helper()
	k, err := secretsKey(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := newAEAD(k)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	return encPrefix + base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(s), goodSecretRow.associatedData()))
}

func TestEncryptSecret(t *testing.T) {
	a, b := encrypt(t, testKey, specSecret), encrypt(t, testKey, specSecret)
	if a == b {
		t.Error("two encryptions of one secret are equal: the nonce is not random")
	}
	if strings.Contains(a, specSecret[len("whsec_"):]) || !strings.HasPrefix(a, encPrefix) {
		t.Errorf("encrypted value %q", a)
	}
	key, _ := secretsKey(testKey)
	row := goodSecretRow
	if got, err := decryptSecret(key, a[len(encPrefix):], &row); err != nil || got != specSecret {
		t.Errorf("decrypt = %q, %v", got, err)
	}
	if _, err := decryptSecret(key, a[len(encPrefix):], nil); err == nil {
		t.Error("an enc:v2 value decrypts without its row")
	}
	// An enc:v1 value is encrypted again for the row.
	if up := encrypt(t, testKey, encryptV1(t, testKey, specSecret)); !strings.HasPrefix(up, encPrefix) {
		t.Errorf("an enc:v1 value encrypted again = %q, want enc:v2", up)
	} else if got, err := decryptSecret(key, up[len(encPrefix):], &row); err != nil || got != specSecret {
		t.Errorf("the enc:v1 value encrypted again decrypts to %q, %v", got, err)
	}
	for _, tc := range []struct {
		name, key, secret string
		row               SecretRow
		want              string
	}{
		{"a key that is not base64", "!!!", specSecret, goodSecretRow, "not valid base64"},
		{"a key of 16 bytes", base64.StdEncoding.EncodeToString(make([]byte, 16)), specSecret, goodSecretRow, "decodes to 16 bytes, not 32"},
		{"a secret that is not whsec_", testKey, "hunter2hunter2hunter2", goodSecretRow, `does not start with "whsec_"`},
		{"no table", testKey, specSecret, SecretRow{ID: "a", URL: "https://a.example/"}, `row: table "" must be schema.table`},
		{"no id", testKey, specSecret, SecretRow{Table: "s.t", URL: "https://a.example/"}, `row: id "" must be`},
		{"no url", testKey, specSecret, SecretRow{Table: "s.t", ID: "a"}, "row: the url is empty"},
		{"an enc:v1 value of another key", testKey, encryptV1(t, otherKey, specSecret), goodSecretRow, "cannot be decrypted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EncryptSecret(tc.key, tc.secret, tc.row)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EncryptSecret = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error quotes the secret: %v", err)
			}
		})
	}
}

func TestTableConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TableConfig
		want string
	}{
		{"a table and nothing else is valid", TableConfig{Table: "shop.outbox_endpoints"}, ""},
		{"a table without schema", TableConfig{Table: "outbox_endpoints"}, `table "outbox_endpoints" must be schema.table`},
		{"a quoted table name", TableConfig{Table: "shop.`x`"}, "must be schema.table"},
		{"a bad key", TableConfig{Table: "s.t", SecretsKey: "short"}, "secrets_key: not valid base64"},
		{"a url in the defaults", TableConfig{Table: "s.t", Defaults: EndpointConfig{URL: "https://x.example/"}}, "defaults.url is set"},
		{"a name in the defaults", TableConfig{Table: "s.t", Defaults: EndpointConfig{Name: "x"}}, "defaults.name is set"},
		{"secrets in the defaults", TableConfig{Table: "s.t", Defaults: EndpointConfig{Secrets: []string{specSecret}}}, "defaults.secrets is set"},
		{"a filter in the defaults", TableConfig{Table: "s.t", Defaults: EndpointConfig{Filter: Filter{EventTypes: []string{"a"}}}}, "defaults.filter is set"},
		{"a bad default", TableConfig{Table: "s.t", Defaults: EndpointConfig{Body: "xml"}}, `defaults: webhook endpoint "defaults": body "xml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), specSecret[6:]) {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
}

func TestDeployedSchemaIsTheConstant(t *testing.T) {
	b, err := os.ReadFile("../../deploy/outbox_endpoints.sql")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), EndpointsTableSchema+";") {
		t.Fatal("deploy/outbox_endpoints.sql does not hold EndpointsTableSchema; copy the constant into it")
	}
}

// Load reads a table made with deploy/outbox_endpoints.sql on a private
// MariaDB: every row, enabled or not; a bad row fails the load naming it; a
// missing table names the schema file.
func TestLoad(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	var logs bytes.Buffer
	tc := TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant", SecretsKey: testKey,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	if _, _, err := tc.Load(ctx, db); err == nil || !strings.Contains(err.Error(), "create it with deploy/outbox_endpoints.sql") {
		t.Fatalf("Load of a missing table = %v, want an error naming deploy/outbox_endpoints.sql", err)
	}

	ddl, err := os.ReadFile("../../deploy/outbox_endpoints.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatalf("deploy/outbox_endpoints.sql: %v", err)
	}
	if eps, bad, err := tc.Load(ctx, db); err != nil || len(eps) != 0 || len(bad) != 0 {
		t.Fatalf("Load of an empty table = %v, %v", eps, err)
	}
	// Where the binlog is now: on MariaDB a GTID position alone is a start
	// (package source, which reads it for the relay, imports this one).
	var start event.Position
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&start.GTIDSet); err != nil {
		t.Fatal(err)
	}
	enc := encryptFor(t, testKey, rotatedSecret, SecretRow{Table: tc.Table, ID: "a-enc", URL: "https://a.example/in"})
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url, secrets, tenant, event_types, aggregate_types, rate_limit, enabled) VALUES
		('b-plain', 'https://b.example/in', ?, 'acme', 'order.*,invoice.*', NULL, 2.5, 1),
		('a-enc', 'https://a.example/in', ?, NULL, NULL, 'order', NULL, 0)`, specSecret, enc); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('c-min', 'https://c.example/in')`); err != nil {
		t.Fatal(err)
	}
	eps, bad, err := tc.Load(ctx, db)
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	var ids []string
	for _, ep := range eps {
		ids = append(ids, ep.ID)
	}
	if !slices.Equal(ids, []string{"a-enc", "b-plain", "c-min"}) {
		t.Fatalf("loaded %v, want a-enc, b-plain, c-min in id order", ids)
	}
	a, b, c := eps[0], eps[1], eps[2]
	if a.Enabled || !slices.Equal(a.Config.Secrets, []string{rotatedSecret}) || !slices.Equal(a.Config.Filter.AggregateTypes, []string{"order"}) {
		t.Errorf("a-enc: %+v", a)
	}
	if !b.Enabled || !slices.Equal(b.Config.Secrets, []string{specSecret}) || b.Config.Filter.Headers["tenant"] != "acme" ||
		!slices.Equal(b.Config.Filter.EventTypes, []string{"order.*", "invoice.*"}) || b.Config.RateLimit != 2.5 {
		t.Errorf("b-plain: %+v", b)
	}
	if !c.Enabled || len(c.Config.Secrets) != 0 || c.Config.URL != "https://c.example/in" || !c.Config.FromData {
		t.Errorf("c-min: %+v", c)
	}
	// The same rows as the binlog reader hands them on (a watched table)
	// give the same endpoints.
	fromBinlog := map[string]TableEndpoint{}
	r, err := canal.New(canal.Config{Host: srv.Host, Port: uint16(srv.Port), User: "root", ServerID: testserver.ServerID(), Flavor: "mariadb",
		Tables: []canal.Table{{Schema: dbname, Name: "no_outbox", Columns: canal.Columns{ID: "id", AggregateID: "a", Payload: "p"}}},
		Watch:  []canal.Watched{{Schema: dbname, Name: "outbox_endpoints"}}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	errDone := errors.New("done")
	err = r.Run(rctx, start, func(_ context.Context, txn *event.Txn) error {
		for _, c := range txn.Changes {
			ep, err := tc.FromRow(c.Row)
			if err != nil {
				return err
			}
			fromBinlog[ep.ID] = ep
		}
		if len(fromBinlog) == len(eps) {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("reading the rows from the binlog: %v", err)
	}
	for _, ep := range eps {
		if got := fromBinlog[ep.ID]; !reflect.DeepEqual(got, ep) {
			t.Errorf("row %s from the binlog:\n%+v\nfrom Load:\n%+v", ep.ID, got, ep)
		}
	}

	if got := logs.String(); !strings.Contains(got, "plain secrets") || !strings.Contains(got, "b-plain") || strings.Contains(got, "a-enc") {
		t.Errorf("want one warning naming b-plain (and not a-enc), got %q", got)
	}
	if strings.Contains(logs.String(), specSecret[6:]) {
		t.Fatal("the warning quotes the secret")
	}

	// An enc:v1 secret is read, with a warning naming its row; a row given
	// a copy of another row's enc:v2 secret is refused, naming it.
	logs.Reset()
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('thief', 'https://thief.example/in', ?)`, encryptV1(t, testKey, specSecret)); err != nil {
		t.Fatal(err)
	}
	if eps, bad, err := tc.Load(ctx, db); err != nil || len(bad) != 0 || len(eps) != 4 || !slices.Equal(eps[3].Config.Secrets, []string{specSecret}) {
		t.Fatalf("Load with an enc:v1 secret = %v, %v, %v", eps, bad, err)
	}
	if got := logs.String(); !strings.Contains(got, "enc:v1 secrets, which are not bound to their row") || !strings.Contains(got, "thief") || strings.Contains(got, "a-enc") {
		t.Errorf("want one enc:v1 warning naming thief, got %q", got)
	}
	if _, err := db.Exec(`UPDATE outbox_endpoints t JOIN outbox_endpoints a ON a.id = 'a-enc' SET t.secrets = a.secrets WHERE t.id = 'thief'`); err != nil {
		t.Fatal(err)
	}
	if eps, bad, err := tc.Load(ctx, db); err != nil || len(eps) != 3 || len(bad) != 1 || bad[0].ID != "thief" ||
		!strings.Contains(bad[0].Error(), `row "thief": secrets[0]: cannot be decrypted with endpoints_table.secrets_key for this row`) {
		t.Errorf("Load with a row holding a copy of a-enc's secret = %v, %v, %v; want the row thief alone refused", eps, bad, err)
	}
	if _, err := db.Exec(`DELETE FROM outbox_endpoints WHERE id = 'thief'`); err != nil {
		t.Fatal(err)
	}

	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url, tenant) VALUES ('d-bad', 'https://d.example/in', 'acme'), ('e-bad', 'ftp://e.example/', NULL)`); err != nil {
		t.Fatal(err)
	}
	tc.TenantHeader = ""
	// Bad rows are returned each with why; the good ones are still read.
	good, bad, err := tc.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if ids := func() (ids []string) {
		for _, g := range good {
			ids = append(ids, g.ID)
		}
		return ids
	}(); !slices.Equal(ids, []string{"a-enc", "c-min"}) {
		t.Errorf("good rows %v, want a-enc, c-min", ids)
	}
	want := map[string][]string{
		"b-plain": {`row "b-plain": tenant is set`},
		"d-bad":   {`row "d-bad": tenant is set but endpoints_table.tenant_header is not`},
		"e-bad":   {`row "e-bad"`, "not an absolute http or https address"},
	}
	if len(bad) != len(want) {
		t.Fatalf("bad rows %v, want b-plain, d-bad, e-bad", bad)
	}
	for _, b := range bad {
		for _, w := range want[b.ID] {
			if !strings.Contains(b.Error(), w) {
				t.Errorf("bad row %s: %v, want it to contain %q", b.ID, b, w)
			}
		}
	}
}

// A row whose tenant changes (and with it its filter) is built again, so
// that its attempts and dead letters are the new tenant's; a row whose
// event types change only is not.
func TestARowGivenToAnotherTenantIsBuiltAgain(t *testing.T) {
	tc := TableConfig{Table: "shop.outbox_endpoints", TenantHeader: "tenant"}
	build := func(modify func(map[string]any)) (rowColumns, EndpointConfig) {
		t.Helper()
		row := goodRow()
		row["tenant"] = "acme"
		modify(row)
		cols, ep, err := tc.WithDefaults().read(row)
		if err != nil {
			t.Fatal(err)
		}
		return cols, ep.Config
	}
	acme, _ := build(func(map[string]any) {})
	globex, globexConfig := build(func(r map[string]any) { r["tenant"] = "globex" })
	types, _ := build(func(r map[string]any) { r["event_types"] = "order.*" })
	if onlyFilterChanged(acme, globex) {
		t.Error("a row given to another tenant keeps its endpoint (and its tenant in what it records)")
	}
	if !onlyFilterChanged(acme, types) {
		t.Error("a row whose event types change is built again")
	}
	if e, err := NewEndpoint(globexConfig, nil); err != nil || e.Tenant() != "globex" {
		t.Errorf("the endpoint's Tenant() = %q (%v), want globex", e.Tenant(), err)
	}
}
