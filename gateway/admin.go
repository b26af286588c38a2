package gateway

import (
	"context"
	"errors"
)

// TableRow is one row of a fan-out sink's endpoints table as an admin (the
// console) reads and writes it: never its secrets.
type TableRow struct {
	// ID names the endpoint: its key is "<sink>/<ID>".
	ID  string `json:"id"`
	URL string `json:"url"`
	// Tenant is the row's tenant ("": an endpoint of every tenant).
	Tenant         string   `json:"tenant,omitempty"`
	EventTypes     []string `json:"event_types,omitempty"`
	AggregateTypes []string `json:"aggregate_types,omitempty"`
	// RateLimit is attempts per second (nil: the table's default).
	RateLimit *float64 `json:"rate_limit,omitempty"`
	Enabled   bool     `json:"enabled"`
	// Secrets is how many signing secrets the row holds.
	Secrets int `json:"secrets"`
	// Invalid says why the row cannot be used ("": it can).
	Invalid string `json:"invalid,omitempty"`
}

// Errors of a TableAdmin, for errors.Is: the row id is not in the table
// (ErrNoRow), is already (ErrRowExists), or the row as asked cannot be
// used (ErrBadRow; the error says which column and how to fix it).
var (
	ErrNoRow     = errors.New("no such endpoint row")
	ErrRowExists = errors.New("the endpoint row exists")
	ErrBadRow    = errors.New("the endpoint row is not valid")
)

// TableAdmin writes one sink's endpoints table, with the rules the relay
// reads it by: a row is validated as the relay would read it before it is
// written (an error names the column and the fix), a row can never take the
// name of an endpoint of the configuration, and secrets are stored
// encrypted for their row when the table has a secrets key. A running
// relay applies each write at the transaction that made it. Safe for
// concurrent use.
type TableAdmin interface {
	// Rows returns every row, ordered by id.
	Rows(ctx context.Context) ([]TableRow, error)
	// Page returns at most limit rows whose id sorts after after ("":
	// from the first), ordered by id (the table's collation); tenant, when
	// set, selects only that tenant's rows. It reads only those rows (a
	// key range with a limit), whatever the table's size.
	Page(ctx context.Context, after, tenant string, limit int) ([]TableRow, error)
	// Row returns the row id (ErrNoRow: none), read by its primary key:
	// one row, whatever the size of the table.
	Row(ctx context.Context, id string) (TableRow, error)
	// Insert adds a row signed with secret (a "whsec_..." value; "":
	// a new random one), and returns the secret.
	Insert(ctx context.Context, row TableRow, secret string) (string, error)
	// Update sets the url, tenant, filters and rate limit of row.ID.
	Update(ctx context.Context, row TableRow) error
	// SetEnabled sets row id's enabled column.
	SetEnabled(ctx context.Context, id string, enabled bool) error
	// Delete removes row id.
	Delete(ctx context.Context, id string) error
	// RotateSecret makes a new random secret the row's first; with keep,
	// the old ones stay (receivers verify either while they switch), else
	// they are removed. It returns the new secret.
	RotateSecret(ctx context.Context, id string, keep bool) (string, error)
}
