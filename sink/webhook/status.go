package webhook

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
)

// status is the webhook kind's part of `outbox-relay status` (its
// sink.Kind's Status): the endpoints of the sink's endpoints table that do
// not run because of their row: off (enabled = 0), invalid (the row cannot
// be used), and rows refused for the name of an endpoint of the
// configuration.
func status(ctx context.Context, db *sql.DB, sc config.Sink) []string {
	wc := Section(sc)
	if wc == nil || wc.EndpointsTable == nil {
		return nil
	}
	tc := wc.EndpointsTable.WithDefaults()
	rows, bad, err := tc.Load(ctx, db)
	if err != nil {
		return []string{fmt.Sprintf("webhook sink %s: %s", sc.Name, err.Error())}
	}
	static := NewStaticNames(wc.Endpoints)
	var lines []string
	for _, b := range bad {
		if _, ok := static.Taken(b.ID); ok {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s/%s %s: %s", sc.Name, b.ID, gateway.Invalid, b.Err))
	}
	for _, r := range rows {
		if _, ok := static.Taken(r.ID); !r.Enabled && !ok {
			lines = append(lines, fmt.Sprintf("  %s/%s %s: its row has enabled = 0", sc.Name, r.ID, gateway.Off))
		}
	}
	for _, id := range append(RowIDs(rows), BadRowIDs(bad)...) {
		if name, ok := static.Taken(id); ok {
			lines = append(lines, fmt.Sprintf("  row %q refused: endpoint %s/%s is in the configuration and runs as configured; rename the row", id, sc.Name, name))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	head := fmt.Sprintf("webhook sink %s: endpoints table %s: %d row(s) not running:", sc.Name, tc.Table, len(lines))
	return append([]string{head}, lines...)
}
