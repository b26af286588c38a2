package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// The built binary against MariaDB, whose endpoints table compares ids in
// utf8mb4's default collation (case insensitive): tenant t2 owns orders;
// tenant t1 creates ORDERS and orders' namesake without learning anything
// of t2's. Each tenant's endpoint runs, and each reads only its own.
func TestTenantsNameTheirEndpointsInNamespacesOfTheirOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB")
	}
	cr := startConsoleRelay(t)
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", cr.t2, map[string]any{"id": "orders", "url": cr.rc.URL + "/two"}, nil); st != 201 {
		t.Fatalf("t2 creates orders: %d", st)
	}
	for _, name := range []string{"ORDERS", "Orders-2"} {
		var got struct{ Endpoint console.Endpoint }
		if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", cr.t1, map[string]any{"id": name, "url": cr.rc.URL + "/one"}, &got); st != 201 || got.Endpoint.Name != name {
			t.Errorf("t1 creates %s while t2 owns orders: %d %+v, want 201", name, st, got.Endpoint)
		}
	}
	// t1's own names collide with its own, as the table's collation says.
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", cr.t1, map[string]any{"id": "orders", "url": cr.rc.URL + "/one"}, nil); st != 409 {
		t.Errorf("t1 creates orders beside its own ORDERS: %d, want 409", st)
	}
	eventually.Within(t, 30*time.Second, "t1's ORDERS and t2's orders attached", func() bool {
		var a, b console.Endpoint
		return cr.call(t, "GET", "/api/v1/endpoints/hooks/ORDERS", cr.t1, nil, &a) == 200 && a.State == "attached" &&
			cr.call(t, "GET", "/api/v1/endpoints/hooks/orders", cr.t2, nil, &b) == 200 && b.State == "attached" && a.ID != b.ID
	}, cr.showLog)
	var list struct{ Endpoints []console.Endpoint }
	if st := cr.call(t, "GET", "/api/v1/endpoints", cr.t2, nil, &list); st != 200 || len(list.Endpoints) != 1 || list.Endpoints[0].Name != "orders" || !strings.HasSuffix(list.Endpoints[0].ID, ".orders") {
		t.Errorf("t2's endpoints: %d %+v, want its orders only", st, list.Endpoints)
	}
	// An event of each tenant reaches that tenant's endpoint only.
	cr.insert("evt-t1", "t1")
	cr.insert("evt-t2", "t2")
	eventually.Within(t, 30*time.Second, "each event at its tenant's endpoint", func() bool {
		return len(cr.rc.Accepted("/one")) >= 2 && len(cr.rc.Accepted("/two")) >= 1
	}, cr.showLog)
	for _, r := range cr.rc.Accepted("/two") {
		if r.EventID != "evt-t2" {
			t.Errorf("t2's orders got %s", r.EventID)
		}
	}
}
