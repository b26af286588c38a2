package check

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/source"
)

// Status is a check's verdict.
type Status int

const (
	Pass Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Warn:
		return "WARN"
	default:
		return "FAIL"
	}
}

// The checks' stable names.
const (
	NameServer                 = "server"
	NameLogBin                 = "log_bin"
	NameBinlogFormat           = "binlog_format"
	NameBinlogRowImage         = "binlog_row_image"
	NameBinlogRowMetadata      = "binlog_row_metadata"
	NameGTIDMode               = "gtid_mode"
	NameEnforceGTIDConsistency = "enforce_gtid_consistency"
	NameGTIDStrictMode         = "gtid_strict_mode"
	NameLogBinCompress         = "log_bin_compress"
	NameBinlogRowValueOptions  = "binlog_row_value_options"
	NamePrivileges             = "privileges"
	NameServerID               = "server_id"
	NameTables                 = "tables"
	NameCheckpointAvailable    = "checkpoint_available"
	NameCheckpointServer       = "checkpoint_server"
	NameBinlogRetention        = "binlog_retention"
	NameReplicaUpdates         = "log_slave_updates"
	NameInsecureSettings       = "insecure_settings"
	NameSinks                  = "sinks"
)

// Names lists every check, in the order Run reports them.
func Names() []string {
	return []string{NameServer, NameLogBin, NameBinlogFormat, NameBinlogRowImage, NameBinlogRowMetadata,
		NameGTIDMode, NameEnforceGTIDConsistency, NameGTIDStrictMode, NameLogBinCompress, NameBinlogRowValueOptions,
		NameReplicaUpdates, NamePrivileges, NameServerID, NameTables, NameOutboxGrowth, NameCheckpointAvailable, NameCheckpointServer, NameBinlogRetention, NameInsecureSettings, NameSinks}
}

// Result is one reported line. A check may report several lines (one per
// table, one per sink's checkpoint), all under its name.
type Result struct {
	Name   string
	Status Status
	// Detail says what was found.
	Detail string
	// Fix is the statement or setting that fixes a WARN or FAIL.
	Fix string
	// Downgraded is set when the check FAILed and Options.AllowFail made it
	// a WARN.
	Downgraded bool
}

// Report is every result of one Run, in order.
type Report struct {
	Results []Result
}

// Failed returns the results that FAILed.
func (r Report) Failed() []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Status == Fail {
			out = append(out, x)
		}
	}
	return out
}

// Get returns the results named name.
func (r Report) Get(name string) []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Name == name {
			out = append(out, x)
		}
	}
	return out
}

// Print writes one line per result, "STATUS  name  detail", and under each
// WARN and FAIL an indented "fix:" line.
func (r Report) Print(w io.Writer) {
	for _, x := range r.Results {
		PrintResult(w, x)
	}
}

// PrintResult writes one result as Print does. Details quote the server
// (table names, variable values) and the config: control characters are
// escaped, never interpreted by the terminal.
func PrintResult(w io.Writer, x Result) {
	// A detail of several lines (one per bad row) prints them indented.
	first, more, _ := strings.Cut(x.Detail, "\n")
	fmt.Fprintf(w, "%s  %-24s  %s\n", x.Status, printable.String(x.Name), printable.String(first))
	for line := range strings.SplitSeq(more, "\n") {
		if line != "" {
			fmt.Fprintf(w, "      %-24s    %s\n", "", printable.String(line))
		}
	}
	if x.Status != Pass && x.Fix != "" {
		fmt.Fprintf(w, "      %-24s  fix: %s\n", "", printable.String(x.Fix))
	}
}

// Options tune Run.
type Options struct {
	// RetentionMin is the binlog retention below which binlog_retention
	// WARNs. Default 24h.
	RetentionMin time.Duration
	// AllowFail names checks whose FAIL is reported as a WARN, with
	// Result.Downgraded set. Unknown names are an error.
	AllowFail []string
	// Sinks also probes the destinations of the sinks that can (the sinks
	// check). `outbox-relay check` sets it; the startup checks of `run` do
	// not: a sink that cannot deliver yet is retried and stops no other.
	Sinks bool
	// SkipGrowth leaves out outbox_growth, which only ever WARNs and, on a
	// table whose created_at column no index leads, reads every row
	// (MIN(created_at)): 140 ms and more of a start against a 200,000-row
	// table. `run` leaves it out of its startup checks and runs Growth once
	// it has started.
	SkipGrowth bool
	// Commits, when set, reads when the transaction that ends at a MariaDB
	// checkpoint's File:Pos committed on the server its binlog is
	// (canal.CommitFinder), for checkpoint_server to compare with the
	// checkpoint's commit_time, as the relay's resume check does
	// (source.CheckResumeAt). `outbox-relay check` sets it; the startup
	// checks of `run` do not: each pipeline compares it when it resumes.
	Commits source.CommitFinder
}

// Run connects to the source with the configured credentials and runs every
// check that applies to its flavor. It returns an error only when it cannot
// check at all (the server cannot be reached); everything else is a Result.
// With that error it still returns the checks made on the config alone
// (insecure_settings) and, with Options.Sinks, the sinks' probes, which
// need no source.
func Run(ctx context.Context, cfg *config.Config, opts Options) (Report, error) {
	defaults.Positive(&opts.RetentionMin, 24*time.Hour)
	for _, n := range opts.AllowFail {
		if !slices.Contains(Names(), n) {
			return Report{}, fmt.Errorf("--allow-fail %q is not a check; the checks are %s", n, strings.Join(Names(), ", "))
		}
	}
	noSource := insecureResults(cfg) // the results that need no source
	if opts.Sinks {
		noSource = append(noSource, sinkResults(ctx, cfg)...)
	}
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		return Report{Results: noSource}, err
	}
	defer db.Close()
	// Checkpoints first, the server's GTID state after: both only move
	// forward, so a checkpoint saved meanwhile (by an active relay whose
	// standby runs these checks) can never look ahead of the server.
	cps, cpErr := loadCheckpoints(ctx, cfg)
	s, err := inspect(ctx, db)
	if err != nil {
		return Report{Results: noSource}, err
	}
	var rep Report
	add := func(rs ...Result) { rep.Results = append(rep.Results, rs...) }

	srv := serverResult(s, cfg.Source.Flavor)
	add(srv)
	if s.flavor == "" {
		add(noSource...)
		return finish(rep, opts), nil
	}

	add(logBinResult(s.vars))
	add(binlogFormatResult(s.vars))
	add(rowImageResult(s.vars))
	add(rowMetadataResult(s))
	if s.flavor == flavorMySQL {
		add(gtidModeResult(s.vars, hasGTIDCheckpoint(cps)))
		add(enforceGTIDResult(s.vars))
		add(rowValueOptionsResult(s.vars))
	} else {
		add(gtidStrictResult(s.vars))
		add(logBinCompressResult(s.vars))
	}
	add(replicaUpdatesResult(ctx, db, s))
	add(privilegesResult(ctx, db, s, cfg))
	add(serverIDResult(ctx, db, s, cfg))
	add(tablesResults(ctx, db, s, cfg)...)
	if !opts.SkipGrowth {
		add(growthResults(ctx, db, cfg)...)
	}
	add(checkpointResults(ctx, db, s, cfg, cps, cpErr, opts.Commits)...)
	add(retentionResult(s.vars, opts.RetentionMin))
	rep.Results = withInsecure(rep.Results, noSource)
	return finish(rep, opts), nil
}

func finish(rep Report, opts Options) Report {
	for i := range rep.Results {
		x := &rep.Results[i]
		if x.Status == Fail && slices.Contains(opts.AllowFail, x.Name) {
			x.Status, x.Downgraded = Warn, true
		}
	}
	return rep
}

const (
	flavorMySQL   = "mysql"
	flavorMariaDB = "mariadb"
)

// server is what was read once from the server and shared by the checks.
type server struct {
	version string // VERSION()
	comment string // @@version_comment
	flavor  string // flavorMySQL, flavorMariaDB, or "" when neither
	major   int
	minor   int
	patch   int
	vars    map[string]string // SHOW GLOBAL VARIABLES, lower-case names
	user    string            // CURRENT_USER() as 'user'@'host'
}

func (s server) atLeast(major, minor, patch int) bool {
	return versionAtLeast(s.major, s.minor, s.patch, major, minor, patch)
}

// serverVars are the global variables the checks read (a variable the
// server does not have is absent from server.vars, as before). inspect
// fetches only these: the whole SHOW GLOBAL VARIABLES is some 600 rows and
// several milliseconds of every start. TestEveryVariableTheChecksReadIsFetched
// holds the list to the vars["…"] the package reads.
var serverVars = []string{
	"binlog_expire_logs_auto_purge", "binlog_expire_logs_seconds", "binlog_format", "binlog_row_image",
	"binlog_row_metadata", "binlog_row_value_options", "binlog_space_limit", "enforce_gtid_consistency",
	"expire_logs_days", "gtid_binlog_pos", "gtid_binlog_state", "gtid_executed", "gtid_mode", "gtid_purged",
	"gtid_strict_mode", "log_bin", "log_bin_compress", "log_replica_updates", "log_slave_updates",
	"max_binlog_total_size", "server_id", "server_uuid",
}

var showServerVars = "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('" + strings.Join(serverVars, "', '") + "')"

func inspect(ctx context.Context, db *sql.DB) (server, error) {
	var s server
	var user string
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment, CURRENT_USER()").Scan(&s.version, &s.comment, &user); err != nil {
		return s, fmt.Errorf("read server version: %w", err)
	}
	name, host, _ := strings.Cut(user, "@")
	s.user = grants.QuoteAccount(name, host)
	s.flavor, s.major, s.minor, s.patch = parseVersion(s.version, s.comment)
	rows, err := db.QueryContext(ctx, showServerVars)
	if err != nil {
		return s, fmt.Errorf("read server variables (SHOW GLOBAL VARIABLES): %w", err)
	}
	defer rows.Close()
	s.vars = map[string]string{}
	for rows.Next() {
		var k string
		var v sql.NullString
		if err := rows.Scan(&k, &v); err != nil {
			return s, fmt.Errorf("read server variables: %w", err)
		}
		s.vars[strings.ToLower(k)] = v.String
	}
	return s, rows.Err()
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}
