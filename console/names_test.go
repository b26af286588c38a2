package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// foldingTable is a memTable whose ids compare as the endpoints table's
// collation and the relay's static names do: by webhook.FoldName (case,
// accents, ß = ss), and whose rows may not take a static name.
type foldingTable struct {
	*memTable
	static webhook.StaticNames
}

func (t foldingTable) Insert(ctx context.Context, r gateway.TableRow, secret string) (string, error) {
	if name, ok := t.static.Taken(r.ID); ok {
		return "", fmt.Errorf("%w: id %q names the endpoint %q of the configuration", gateway.ErrBadRow, r.ID, name)
	}
	t.mu.Lock()
	for id := range t.rows {
		if webhook.FoldName(id) == webhook.FoldName(r.ID) {
			t.mu.Unlock()
			return "", fmt.Errorf("%w: a row %q is in shop.outbox_endpoints already", gateway.ErrRowExists, r.ID)
		}
	}
	t.mu.Unlock()
	return t.memTable.Insert(ctx, r, secret)
}

// A tenant's create answers the same whatever another tenant or the
// configuration has named its endpoints: "orders" or "ORDERS" while
// another tenant owns orders, "BILLING" or "strasse" while the
// configuration has billing and straße, are each created, in the tenant's
// own namespace (the old console answered 409 naming the table, and 422
// naming the configuration's endpoint). The tenant addresses its endpoint
// by its name; the other tenant's stays untouched.
func TestATenantsCreateTellsNothingOfOtherTenantsOrTheConfiguration(t *testing.T) {
	f := newFixture(t)
	table := foldingTable{memTable: f.table, static: webhook.NewStaticNames([]webhook.EndpointConfig{{Name: "billing"}, {Name: "straße"}})}
	f.s.sinks["hooks"] = Sink{Name: "hooks", Static: []string{"ops-hook", "billing", "straße"}, Table: table}
	// Tenant B owns "orders" (made before namespaces: its id is its name)
	// and, in its own namespace, "invoices".
	f.table.rows["orders"] = gateway.TableRow{ID: "orders", URL: "https://b-secret.example/o", Tenant: "B", Enabled: true}
	if res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenB, `{"id":"invoices","url":"https://b-secret.example/i"}`); res.StatusCode != 201 {
		t.Fatalf("tenant B creates invoices: %d %s", res.StatusCode, body)
	}
	for _, name := range []string{"ORDERS", "invoices", "BILLING", "strasse", "ops-hook"} {
		res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"`+name+`","url":"https://a.example/`+name+`"}`)
		var got struct{ Endpoint Endpoint }
		_ = json.Unmarshal([]byte(body), &got)
		if res.StatusCode != http.StatusCreated || got.Endpoint.Name != name || got.Endpoint.Tenant != "A" {
			t.Errorf("tenant A creates %q: %d %s, want 201 and an endpoint of A's named so", name, res.StatusCode, body)
		}
		for _, leak := range []string{"b-secret", "outbox_endpoints", "configuration", "straße", "billing"} {
			if strings.Contains(body, leak) {
				t.Errorf("tenant A's create of %q shows %q: %s", name, leak, body)
			}
		}
		res, body = f.do(t, "GET", "/api/v1/endpoints/hooks/"+name, f.tenA, "")
		if res.StatusCode != 200 || !strings.Contains(body, "https://a.example/"+name) {
			t.Errorf("tenant A reads its %q: %d %s", name, res.StatusCode, body)
		}
	}
	// Its own names collide only with its own (here as the collation
	// compares them).
	res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"orders","url":"https://a.example/again"}`)
	isProblem(t, "tenant A creates orders beside its ORDERS", res, body, http.StatusConflict)
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"a1","url":"https://a.example/again"}`)
	isProblem(t, "tenant A creates a1, which it has (made before namespaces)", res, body, http.StatusConflict)
	// Tenant B's endpoints are as they were, and tenant A still cannot
	// reach them, by name or by id.
	if r := f.table.rows["orders"]; r.Tenant != "B" || r.URL != "https://b-secret.example/o" {
		t.Errorf("tenant B's orders changed: %+v", r)
	}
	bID := namespace("B") + "invoices"
	for _, path := range []string{"/api/v1/endpoints/hooks/" + bID, "/api/v1/endpoints/hooks/" + namespace("A") + "invoices"} {
		res, body := f.do(t, "GET", path, f.tenB, "")
		if path == "/api/v1/endpoints/hooks/"+bID && (res.StatusCode != 200 || !strings.Contains(body, `"name":"invoices"`)) {
			t.Errorf("tenant B reads its invoices by id: %d %s", res.StatusCode, body)
		}
	}
	res, body = f.do(t, "DELETE", "/api/v1/endpoints/hooks/"+bID, f.tenA, "")
	isProblem(t, "tenant A deletes B's invoices by id", res, body, http.StatusNotFound)
	// An operator cannot put a row in a tenant's namespace for another
	// tenant (that tenant's create would then collide with it).
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.op, `{"id":"`+namespace("A")+`x","url":"https://x.example/","tenant":"B"}`)
	isProblem(t, "the operator makes a row in A's namespace for B", res, body, http.StatusUnprocessableEntity)
	res, body = f.do(t, "PUT", "/api/v1/endpoints/hooks/"+namespace("A")+"ORDERS", f.op, `{"url":"https://a.example/orders","tenant":"B"}`)
	isProblem(t, "the operator gives a row of A's namespace to B", res, body, http.StatusUnprocessableEntity)
	// A name is checked by its own rules only.
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"`+strings.Repeat("n", maxTenantName+1)+`","url":"https://a.example/"}`)
	isProblem(t, "a name too long", res, body, http.StatusUnprocessableEntity)
}
