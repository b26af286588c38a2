package canal

import "github.com/outbox-relay/outbox-relay/config"

// TablesOf converts the configured outbox tables (config's tables[]) to the
// reader's.
func TablesOf(tables []config.Table) []Table {
	var out []Table
	for _, t := range tables {
		schema, name := t.SchemaTable()
		out = append(out, Table{Schema: schema, Name: name, Headers: t.Headers, Columns: Columns{
			ID:            config.Column(t.Columns.ID),
			AggregateType: config.Column(t.Columns.AggregateType),
			AggregateID:   config.Column(t.Columns.AggregateID),
			Type:          config.Column(t.Columns.Type),
			Payload:       config.Column(t.Columns.Payload),
			TraceParent:   t.Columns.TraceParent,
			TraceState:    t.Columns.TraceState,
		}})
	}
	return out
}
