package console

// This file owns the tenants' namespaces of endpoint names: a tenant names
// its endpoints as it likes, and the row id the relay stores is made from
// the tenant and the name, so that no name of one tenant can collide with
// another tenant's (docs/console-api.md, "Endpoint names").

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// maxTenantName is the longest name a tenant gives an endpoint: a row id
// is at most 64 characters, and its namespace takes len(namespace(t)).
const maxTenantName = 64 - 1 - 16 - 1

// tenantNameRe is a tenant's endpoint name: what a row id may hold.
var tenantNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// namespacedRe is a row id in a tenant's namespace.
var namespacedRe = regexp.MustCompile(`^t[0-9a-f]{16}\.`)

// namespace returns the prefix of the row ids of tenant's endpoints: "t",
// 16 hex digits of a SHA-256 of the tenant, and ".". It is lower-case hex,
// so no collation (case or accent insensitive, trailing spaces ignored)
// takes one tenant's for another's.
func namespace(tenant string) string {
	sum := sha256.Sum256([]byte("outbox-relay endpoint namespace\x00" + tenant))
	return "t" + hex.EncodeToString(sum[:8]) + "."
}

// rowIDs returns the row ids that name asked by p may be, in order: the
// operator's name is the row id; a tenant's is its namespace and the name,
// or the id itself when it is in that namespace already (attempts and dead
// letters name an endpoint by its id), or, last, the id of a row made
// before namespaces (whose tenant column must then be the tenant's, as for
// every row a tenant reaches).
func rowIDs(p principal, name string) []string {
	if p.operator() {
		return []string{name}
	}
	ns := namespace(p.tenant)
	if strings.HasPrefix(name, ns) {
		return []string{name}
	}
	return []string{ns + name, name}
}

// displayName returns the name p knows row id by: a tenant's own
// namespace taken off.
func displayName(p principal, id string) string {
	if p.operator() {
		return id
	}
	if name, ok := strings.CutPrefix(id, namespace(p.tenant)); ok && name != "" {
		return name
	}
	return id
}

// checkTenantName says what is wrong with a name a tenant gives a new
// endpoint. It depends on the name and the tenant only: it tells nothing
// of any other tenant's endpoints.
func checkTenantName(tenant, name string) error {
	if len(name) > maxTenantName || !tenantNameRe.MatchString(name) {
		return fmt.Errorf("id %q: name the endpoint with 1 to %d letters, digits, '.', '_' or '-'", name, maxTenantName)
	}
	if namespacedRe.MatchString(name) {
		return fmt.Errorf("id %q: a name cannot start with t, 16 hex digits and '.' (the form of the ids the relay makes)", name)
	}
	return nil
}

// checkNamespace says what is wrong with a row id and tenant an operator
// writes: an id in a tenant's namespace belongs to that tenant's rows
// only, else that tenant's create of the name would collide with it.
func checkNamespace(id, tenant string) error {
	if ns := namespacedRe.FindString(id); ns != "" && (tenant == "" || ns != namespace(tenant)) {
		return fmt.Errorf("id %q is in the namespace of another tenant than %q (t, 16 hex digits and '.' start the ids the console makes for a tenant's endpoints): choose an id that does not start so", id, tenant)
	}
	return nil
}
