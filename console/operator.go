package console

import (
	"fmt"
	"log/slog"
)

// What the console does to an endpoints table, for an operator's writes
// that do not come through it (`outbox-relay endpoints add|update|delete|
// rotate-secret`): the same checks and the same audit line.

// CheckRowID says what is wrong with a row id and tenant an operator
// writes: an id in a tenant's namespace belongs to that tenant's rows only.
func CheckRowID(id, tenant string) error { return checkNamespace(id, tenant) }

// StaticError is the refusal to change endpoint key of sink, which is in
// the configuration rather than in the endpoints table.
func StaticError(key, sink string) error {
	return fmt.Errorf("endpoint %s is in the configuration (endpoints of sink %s): change it there", key, sink)
}

// Audit logs one write to log, as the console logs each of its own: who
// (a token's name), the tenant, the action ("create endpoint"), its target
// (the endpoint's key) and the result ("ok" or the error). Never a secret.
func Audit(log *slog.Logger, who, tenant, action, target string, err error) {
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	log.Info("console audit", slog.String("who", who), slog.String("tenant", tenant), slog.String("action", action),
		slog.String("target", target), slog.String("result", result))
}
