package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// The console's writes of the endpoints table, against MariaDB: each row
// is what FromRow accepts, secrets are sealed for their row (again when
// the url changes), and no row takes a static endpoint's name.
func TestTableAdminWritesRowsTheRelayReads(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	if _, err := db.Exec(EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	sc := &SinkConfig{Endpoints: []EndpointConfig{{Name: "billing", URL: "https://billing.example/"}},
		EndpointsTable: &TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant", SecretsKey: testKey}}
	ta, err := admin("hooks", sc, db)
	if err != nil {
		t.Fatal(err)
	}
	tc := sc.EndpointsTable.WithDefaults()
	read := func(id string) TableEndpoint {
		t.Helper()
		eps, bad, err := tc.Load(ctx, db)
		if err != nil || len(bad) > 0 {
			t.Fatalf("Load: %v %v", err, bad)
		}
		for _, e := range eps {
			if e.ID == id {
				return e
			}
		}
		t.Fatalf("no row %s", id)
		return TableEndpoint{}
	}

	secret, err := ta.Insert(ctx, gateway.TableRow{ID: "shop", URL: "https://shop.example/hook", Tenant: "acme", EventTypes: []string{"order.*"}, Enabled: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	ep := read("shop")
	if len(ep.Config.Secrets) != 1 || ep.Config.Secrets[0] != secret || ep.PlainSecrets || ep.Config.Filter.Headers["tenant"] != "acme" || ep.Config.Filter.EventTypes[0] != "order.*" {
		t.Errorf("the row as the relay reads it: %+v (secret returned %q)", ep, secret[:8])
	}
	var stored string
	_ = db.QueryRow("SELECT secrets FROM outbox_endpoints WHERE id = 'shop'").Scan(&stored)
	if !strings.HasPrefix(stored, "enc:v2:") || strings.Contains(stored, secret) {
		t.Errorf("the secret is stored as %.12s…, want it sealed for the row", stored)
	}

	for _, c := range []struct {
		name string
		row  gateway.TableRow
		want error
		says string
	}{
		{"a row named as an endpoint of the configuration", gateway.TableRow{ID: "Billing", URL: "https://x.example/"}, gateway.ErrBadRow, "endpoint \"billing\" of the configuration"},
		{"a row that exists", gateway.TableRow{ID: "shop", URL: "https://x.example/"}, gateway.ErrRowExists, "update it"},
		{"an id that cannot name an endpoint", gateway.TableRow{ID: "a/b", URL: "https://x.example/"}, gateway.ErrBadRow, "letters, digits"},
		{"a tenant without the table's tenant_header is fine, a bad url is not", gateway.TableRow{ID: "bad", URL: "ftp://x.example/"}, gateway.ErrBadRow, "url"},
	} {
		_, err := ta.Insert(ctx, c.row, "")
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}

	// A new url: the secret is sealed again for it, and still the same.
	if err := ta.Update(ctx, gateway.TableRow{ID: "shop", URL: "https://shop.example/v2", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if ep := read("shop"); ep.Config.URL != "https://shop.example/v2" || len(ep.Config.Secrets) != 1 || ep.Config.Secrets[0] != secret || !ep.Enabled || len(ep.Config.Filter.EventTypes) != 0 {
		t.Errorf("after the update: %+v", ep)
	}
	rotated, err := ta.RotateSecret(ctx, "shop", true)
	if err != nil {
		t.Fatal(err)
	}
	if ep := read("shop"); len(ep.Config.Secrets) != 2 || ep.Config.Secrets[0] != rotated || ep.Config.Secrets[1] != secret {
		t.Errorf("after a rotation keeping the old secret: %d secrets", len(ep.Config.Secrets))
	}
	if err := ta.SetEnabled(ctx, "shop", false); err != nil {
		t.Fatal(err)
	}
	if r, err := ta.Row(ctx, "shop"); err != nil || r.Enabled || r.Secrets != 2 || r.Invalid != "" {
		t.Errorf("disabled row: %+v %v", r, err)
	}
	if err := ta.Delete(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := ta.Row(ctx, "shop"); !errors.Is(err, gateway.ErrNoRow) {
		t.Errorf("a deleted row: %v, want ErrNoRow", err)
	}
	if err := ta.SetEnabled(ctx, "shop", true); !errors.Is(err, gateway.ErrNoRow) {
		t.Errorf("enabling a missing row: %v, want ErrNoRow", err)
	}
}
