package check

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/source"
)

// NameOutboxGrowth warns when an outbox table keeps rows older than the
// retention and nothing prunes it.
const NameOutboxGrowth = "outbox_growth"

const noPruneNeeded = "if your producers insert and delete the row in one transaction, nothing needs pruning (the binlog keeps the INSERT)"

// Growth connects to the source and runs outbox_growth alone: what Run
// leaves out with Options.SkipGrowth. It returns an error only when it
// cannot connect.
func Growth(ctx context.Context, cfg *config.Config) (Report, error) {
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		return Report{}, err
	}
	defer db.Close()
	return Report{Results: growthResults(ctx, db, cfg)}, nil
}

func growthResults(ctx context.Context, db *sql.DB, cfg *config.Config) []Result {
	var out []Result
	pr := cfg.Prune
	fix := fmt.Sprintf("run `outbox-relay prune --config FILE` periodically (it deletes only what every sink acknowledged), or set prune.schedule (e.g. 1h) so the active relay does; %s", noPruneNeeded)
	if pr.Schedule > 0 {
		fix = "pruning is scheduled but held back: `outbox-relay prune --config FILE --dry-run` says by what (a sink that is down or behind, a sink that never ran, a missing or application-set timestamp column)"
	}
	for _, t := range cfg.Tables {
		schema, name := t.SchemaTable()
		col := t.Columns.CreatedAt
		var rows sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name).Scan(&rows); err != nil {
			continue // the tables check reports a missing or unreadable table
		}
		cols, err := columnTypes(ctx, db, schema, name)
		if err != nil {
			continue
		}
		if _, has := cols[strings.ToLower(col)]; !has {
			if rows.Int64 > 0 && pr.Schedule == 0 {
				out = append(out, Result{Name: NameOutboxGrowth, Status: Warn,
					Detail: fmt.Sprintf("%s holds about %d rows and has no column %s, so their age is unknown and nothing prunes them", t.Name, rows.Int64, col),
					Fix:    fmt.Sprintf("add `%s TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)` with an index, then prune (`outbox-relay prune`, or prune.schedule); %s", col, noPruneNeeded)})
			} else {
				out = append(out, Result{Name: NameOutboxGrowth, Status: Pass, Detail: fmt.Sprintf("%s: about %d rows", t.Name, rows.Int64)})
			}
			continue
		}
		q := "SELECT UNIX_TIMESTAMP(MIN(" + sqlident.Quote(col) + ")) FROM " + sqlident.Table(schema, name)
		var oldest sql.NullFloat64
		if err := db.QueryRowContext(ctx, q).Scan(&oldest); err != nil {
			continue
		}
		if !oldest.Valid {
			out = append(out, Result{Name: NameOutboxGrowth, Status: Pass, Detail: fmt.Sprintf("%s is empty", t.Name)})
			continue
		}
		age := time.Since(time.Unix(int64(oldest.Float64), 0)).Round(time.Second)
		limit := pr.OlderThan
		if pr.Schedule > 0 {
			limit += 2*pr.Schedule + pr.SafetyMargin
		}
		if age > limit {
			what := "nothing in this relay's config prunes it (prune.schedule is 0)"
			if pr.Schedule > 0 {
				what = fmt.Sprintf("prune.schedule is %s", pr.Schedule)
			}
			out = append(out, Result{Name: NameOutboxGrowth, Status: Warn,
				Detail: fmt.Sprintf("%s holds rows %s old, older than prune.older_than (%s), and %s", t.Name, age, pr.OlderThan, what),
				Fix:    fix})
			continue
		}
		out = append(out, Result{Name: NameOutboxGrowth, Status: Pass, Detail: fmt.Sprintf("%s: oldest row %s old (retention %s)", t.Name, age, strings.TrimSuffix(pr.OlderThan.String(), "0m0s"))})
	}
	return out
}
