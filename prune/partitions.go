package prune

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// partitioning is a table RANGE-partitioned by its timestamp column.
type partitioning struct {
	// kind is how a bound reads: "to_days" (a day number), "unix_timestamp"
	// (seconds) or "columns" (a date or datetime literal).
	kind  string
	parts []partition
}

type partition struct {
	name string
	desc string // PARTITION_DESCRIPTION: the exclusive upper bound, or MAXVALUE
	rows int64  // TABLE_ROWS: an estimate
	max  bool
	// upper is desc as a time; set by bounds.
	upper time.Time
}

var quotedLiteral = regexp.MustCompile(`^'([0-9: .-]+)'$`)

// readPartitioning returns the table's partitioning when prune can drop its
// partitions (RANGE by TO_DAYS(col), UNIX_TIMESTAMP(col), or RANGE
// COLUMNS(col)); nil when it is not partitioned, or otherwise (then rows
// are deleted, and a warning says why).
func readPartitioning(ctx context.Context, conn *sql.Conn, t Table) (*partitioning, error) {
	rows, err := conn.QueryContext(ctx, "SELECT PARTITION_NAME, PARTITION_METHOD, COALESCE(PARTITION_EXPRESSION, ''), COALESCE(PARTITION_DESCRIPTION, ''), COALESCE(TABLE_ROWS, 0), SUBPARTITION_NAME IS NOT NULL "+
		"FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL ORDER BY PARTITION_ORDINAL_POSITION, SUBPARTITION_ORDINAL_POSITION", t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %s: %w", t.FullName(), err)
	}
	defer rows.Close()
	var p partitioning
	var method, expr string
	sub := false
	for rows.Next() {
		var x partition
		var s bool
		if err := rows.Scan(&x.name, &method, &expr, &x.desc, &x.rows, &s); err != nil {
			return nil, err
		}
		sub = sub || s
		x.max = strings.EqualFold(x.desc, "MAXVALUE")
		p.parts = append(p.parts, x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(p.parts) == 0 {
		return nil, nil
	}
	e := strings.ToLower(strings.NewReplacer("`", "", " ", "").Replace(expr))
	col := strings.ToLower(t.Column)
	switch {
	case sub:
	case method == "RANGE" && e == "to_days("+col+")":
		p.kind = "to_days"
	case method == "RANGE" && e == "unix_timestamp("+col+")":
		p.kind = "unix_timestamp"
	case method == "RANGE COLUMNS" && e == col:
		p.kind = "columns"
	}
	if p.kind == "" {
		return nil, fmt.Errorf("table %s is partitioned (%s %s) but not RANGE by %s alone (TO_DAYS, UNIX_TIMESTAMP or RANGE COLUMNS), so prune cannot tell a partition's time span: repartition it, or remove the partitioning to have rows deleted", t.FullName(), method, expr, t.Column)
	}
	for _, x := range p.parts {
		if !x.max && p.kind == "columns" && !quotedLiteral.MatchString(x.desc) {
			return nil, fmt.Errorf("partition %s of %s has the bound %s: prune reads date and datetime bounds only", x.name, t.FullName(), x.desc)
		}
	}
	return &p, nil
}

// bounds sets every partition's upper bound as a time, asking the server
// (in the session's time zone, as the column's values are).
func (p *partitioning) bounds(ctx context.Context, conn *sql.Conn) error {
	for i := range p.parts {
		x := &p.parts[i]
		if x.max {
			continue
		}
		var q string
		var arg any
		switch p.kind {
		case "to_days":
			q, arg = "SELECT UNIX_TIMESTAMP(FROM_DAYS(?))", x.desc
		case "unix_timestamp":
			q, arg = "SELECT ?", x.desc
		default:
			q, arg = "SELECT UNIX_TIMESTAMP(?)", quotedLiteral.FindStringSubmatch(x.desc)[1]
		}
		var s sql.NullString
		if err := conn.QueryRowContext(ctx, q, arg).Scan(&s); err != nil {
			return fmt.Errorf("read the bound of partition %s: %w", x.name, err)
		}
		t, err := parseUnix(s.String)
		if err != nil {
			return err
		}
		x.upper = t
	}
	return nil
}

// partitions drops every partition whose rows are all before cutoff (its
// upper bound at or before it; never the last one, never MAXVALUE), then
// creates PartitionsAhead partitions ahead of now.
func (p *Pruner) partitions(ctx context.Context, conn *sql.Conn, t Table, m meta, cutoff time.Time, tr *TableResult) error {
	parts := m.parts
	if err := parts.bounds(ctx, conn); err != nil {
		return err
	}
	kept := len(parts.parts)
	for _, x := range parts.parts {
		if cutoff.IsZero() || x.max || x.upper.After(cutoff) || kept == 1 {
			break // bounds ascend: no later partition qualifies
		}
		tr.Dropped = append(tr.Dropped, x.name)
		tr.Rows += x.rows
		kept--
		if p.opts.DryRun {
			continue
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE "+t.quoted()+" DROP PARTITION "+ident(x.name)); err != nil {
			tr.Dropped = tr.Dropped[:len(tr.Dropped)-1]
			return fmt.Errorf("drop partition %s (all rows before %s): %w%s", x.name, x.upper.Format(time.RFC3339), err, deniedHint(err, t, "ALTER", "DROP"))
		}
		p.log.Info("prune: dropped a partition", slog.String("table", t.FullName()), slog.String("partition", x.name), slog.Time("rows_before", x.upper), slog.Int64("rows_estimate", x.rows))
		if p.opts.Observer != nil {
			p.opts.Observer.PartitionDropped(t.FullName())
		}
	}
	if cutoff.IsZero() {
		tr.Skipped = "held back: nothing is acknowledged by every sink yet"
	}
	return p.ahead(ctx, conn, t, parts.parts[len(parts.parts)-kept:], parts.kind, tr)
}

// ahead creates partitions, at the step of the last two, until
// PartitionsAhead of them start after now.
func (p *Pruner) ahead(ctx context.Context, conn *sql.Conn, t Table, parts []partition, kind string, tr *TableResult) error {
	want := p.opts.PartitionsAhead
	if want == 0 {
		return nil
	}
	var bounded []partition
	var maxName string
	names := map[string]bool{}
	for _, x := range parts {
		names[strings.ToLower(x.name)] = true
		if x.max {
			maxName = x.name
		} else {
			bounded = append(bounded, x)
		}
	}
	if len(bounded) < 2 {
		p.log.Warn("prune: cannot create partitions ahead: the step is read from the last two bounded partitions, and there are fewer", slog.String("table", t.FullName()))
		return nil
	}
	var now string
	if err := conn.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&now); err != nil {
		return err
	}
	nowT, err := parseUnix(now)
	if err != nil {
		return err
	}
	a, b := bounded[len(bounded)-2], bounded[len(bounded)-1]
	ahead := 0 // partitions that start (their lower bound) after now
	for i := 1; i < len(bounded); i++ {
		if bounded[i-1].upper.After(nowT) {
			ahead++
		}
	}
	step, err := stepOf(kind, a.desc, b.desc)
	if err != nil || step.n <= 0 {
		p.log.Warn("prune: cannot create partitions ahead: no step between the last two partitions", slog.String("table", t.FullName()), slog.String("bounds", a.desc+", "+b.desc))
		return nil
	}
	var defs []string
	lower, upperT := b.desc, b.upper
	for ahead < want {
		if len(defs) == 1000 {
			return fmt.Errorf("creating partitions ahead: more than 1000 would be needed (the last ends at %s)", b.upper.Format(time.RFC3339))
		}
		next := step.next(lower)
		name := partitionName(kind, lower, step)
		if names[strings.ToLower(name)] {
			name += "_" + strings.NewReplacer("-", "", ":", "", " ", "", "'", "").Replace(next)
		}
		names[strings.ToLower(name)] = true
		defs = append(defs, "PARTITION "+ident(name)+" VALUES LESS THAN ("+next+")")
		tr.Created = append(tr.Created, name)
		if upperT.After(nowT) { // the new partition starts after now
			ahead++
		}
		u, err := step.upper(ctx, conn, kind, next)
		if err != nil {
			return err
		}
		lower, upperT = next, u
	}
	if len(defs) == 0 || p.opts.DryRun {
		return nil
	}
	q := "ALTER TABLE " + t.quoted() + " ADD PARTITION (" + strings.Join(defs, ", ") + ")"
	if maxName != "" {
		q = "ALTER TABLE " + t.quoted() + " REORGANIZE PARTITION " + ident(maxName) + " INTO (" + strings.Join(defs, ", ") + ", PARTITION " + ident(maxName) + " VALUES LESS THAN (MAXVALUE))"
	}
	if _, err := conn.ExecContext(ctx, q); err != nil {
		tr.Created = nil
		return fmt.Errorf("create partitions ahead: %w", err)
	}
	p.log.Info("prune: created partitions ahead", slog.String("table", t.FullName()), slog.Any("partitions", tr.Created))
	if p.opts.Observer != nil {
		for range tr.Created {
			p.opts.Observer.PartitionCreated(t.FullName())
		}
	}
	return nil
}

// step is the distance between two partition bounds: n days (to_days), n
// seconds (unix_timestamp), or a duration between literals (columns).
type step struct {
	kind   string
	n      int64
	layout string // columns: the literals' layout
}

const (
	dateLayout     = "2006-01-02"
	datetimeLayout = "2006-01-02 15:04:05"
)

func stepOf(kind, a, b string) (step, error) {
	switch kind {
	case "to_days", "unix_timestamp":
		x, err1 := strconv.ParseInt(a, 10, 64)
		y, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			return step{}, fmt.Errorf("bounds %q, %q are not integers", a, b)
		}
		return step{kind: kind, n: y - x}, nil
	}
	la, lb := quotedLiteral.FindStringSubmatch(a)[1], quotedLiteral.FindStringSubmatch(b)[1]
	layout := datetimeLayout
	if len(la) == len(dateLayout) {
		layout = dateLayout
	}
	x, err1 := time.Parse(layout, la)
	y, err2 := time.Parse(layout, lb)
	if err1 != nil || err2 != nil {
		return step{}, fmt.Errorf("bounds %s, %s are not %s", a, b, layout)
	}
	return step{kind: kind, n: int64(y.Sub(x) / time.Second), layout: layout}, nil
}

// next is the bound one step after bound, as it is written in DDL.
func (s step) next(bound string) string {
	if s.kind != "columns" {
		v, _ := strconv.ParseInt(bound, 10, 64)
		return strconv.FormatInt(v+s.n, 10)
	}
	t, _ := time.Parse(s.layout, quotedLiteral.FindStringSubmatch(bound)[1])
	return "'" + t.Add(time.Duration(s.n)*time.Second).Format(s.layout) + "'"
}

// upper is a bound as a time, read by the server.
func (s step) upper(ctx context.Context, conn *sql.Conn, kind, bound string) (time.Time, error) {
	x := partition{desc: bound}
	p := partitioning{kind: kind, parts: []partition{x}}
	if err := p.bounds(ctx, conn); err != nil {
		return time.Time{}, err
	}
	return p.parts[0].upper, nil
}

// partitionName names a new partition after its lower bound: p20240131
// for a step of whole days, p202401311500 otherwise.
func partitionName(kind, lower string, s step) string {
	var t time.Time
	daily := false
	switch kind {
	case "to_days":
		v, _ := strconv.ParseInt(lower, 10, 64)
		t = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, int(v-719528)) // TO_DAYS('1970-01-01')
		daily = true
	case "unix_timestamp":
		v, _ := strconv.ParseInt(lower, 10, 64)
		t = time.Unix(v, 0).UTC()
		daily = s.n%86400 == 0
	default:
		t, _ = time.Parse(s.layout, quotedLiteral.FindStringSubmatch(lower)[1])
		daily = s.n%86400 == 0
	}
	if daily {
		return "p" + t.Format("20060102")
	}
	return "p" + t.Format("200601021504")
}
