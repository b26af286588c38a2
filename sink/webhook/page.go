package webhook

// This file owns the paged reads of the endpoints table: one page of rows
// by primary key range, for the console's lists.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/sink"
)

// RowsPage reads at most limit rows of the endpoints table whose id sorts
// after after ("": from the first), ordered by id, as FromRow takes them:
// "WHERE id > ? ORDER BY id LIMIT n" on the primary key, so a page costs
// the same whatever the table's size. tenant, when set, selects only the
// rows of that tenant ("AND tenant = ?"): with the index ix_tenant
// (tenant, id) of EndpointsTableSchema it reads only that tenant's rows;
// without it, the database walks the primary key until the page is full
// (CheckTenantIndex says so). Ids compare by the table's collation, in
// the database, on every page alike. err is for the table itself, as for
// Rows.
func (tc TableConfig) RowsPage(ctx context.Context, db *sql.DB, after, tenant string, limit int) ([]map[string]any, error) {
	if !tableNameRe.MatchString(tc.Table) {
		return nil, fmt.Errorf("endpoints_table: table %q must be schema.table, e.g. shop.outbox_endpoints", tc.Table)
	}
	if limit < 1 {
		return nil, nil
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE id > ?", strings.Join(tableColumns, ", "), tc.quoted())
	args := []any{after}
	if tenant != "" {
		q += " AND tenant = ?"
		args = append(args, tenant)
	}
	q += fmt.Sprintf(" ORDER BY id LIMIT %d", limit)
	res, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, tc.readErr(err)
	}
	defer res.Close()
	out := make([]map[string]any, 0, limit)
	for res.Next() {
		row, _, err := scanRow(res)
		if err != nil {
			return nil, fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
		}
		out = append(out, row)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("read webhook endpoints from %s: %w", tc.Table, err)
	}
	return out, nil
}

// TenantIndexMissing reports whether the endpoints table lacks an index
// whose first columns are (tenant, id): without it a tenant's page of
// RowsPage walks the primary key past other tenants' rows.
func (tc TableConfig) TenantIndexMissing(ctx context.Context, db *sql.DB) (bool, error) {
	schema, name, _ := strings.Cut(tc.Table, ".")
	rows, err := db.QueryContext(ctx, "SELECT index_name, column_name, seq_in_index FROM information_schema.statistics WHERE table_schema = ? AND table_name = ? ORDER BY index_name, seq_in_index", schema, name)
	if err != nil {
		return false, tc.readErr(err)
	}
	defer rows.Close()
	cols := map[string][]string{}
	for rows.Next() {
		var ix, col string
		var seq int
		if err := rows.Scan(&ix, &col, &seq); err != nil {
			return false, err
		}
		cols[ix] = append(cols[ix], strings.ToLower(col))
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, c := range cols {
		if len(c) >= 2 && c[0] == "tenant" && c[1] == "id" || len(c) == 1 && c[0] == "tenant" { // InnoDB appends the primary key to a secondary index
			return false, nil
		}
	}
	return true, nil
}

// Page implements gateway.TableAdmin: one page of rows by primary key
// range (RowsPage).
func (ta *tableAdmin) Page(ctx context.Context, after, tenant string, limit int) ([]gateway.TableRow, error) {
	return ta.views(ta.tc.RowsPage(ctx, ta.db, after, tenant, limit))
}

// tenantIndexResult warns, for a table with tenants (tenant_header set),
// when it has no index on (tenant, id): a tenant's page of the console
// then walks other tenants' rows. The relay never alters the table.
func tenantIndexResult(ctx context.Context, db *sql.DB, sinkName string, tc TableConfig) []sink.Finding {
	if tc.TenantHeader == "" {
		return nil
	}
	missing, err := tc.TenantIndexMissing(ctx, db)
	if err != nil || !missing {
		return nil
	}
	return []sink.Finding{{Status: sink.Warned,
		Detail: fmt.Sprintf("sink %s: endpoints table %s has no index on (tenant, id): a tenant's page of endpoints in the console reads past the other tenants' rows, and takes longer the larger the table", sinkName, tc.Table),
		Fix:    fmt.Sprintf("ALTER TABLE %s ADD KEY ix_tenant (tenant, id) (deploy/outbox_endpoints.sql declares it)", tc.Table)}}
}
