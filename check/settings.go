package check

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseVersion tells the flavor and version from VERSION() and
// @@version_comment. flavor is "" for a server that is neither MySQL nor
// MariaDB (TiDB, or a version that cannot be read).
func parseVersion(version, comment string) (flavor string, major, minor, patch int) {
	v := strings.ToLower(version)
	c := strings.ToLower(comment)
	if strings.Contains(v, "tidb") || strings.Contains(c, "tidb") {
		return "", 0, 0, 0
	}
	flavor = flavorMySQL
	if strings.Contains(v, "mariadb") || strings.Contains(c, "mariadb") {
		flavor = flavorMariaDB
		v = strings.TrimPrefix(v, "5.5.5-")
	}
	num, _, _ := strings.Cut(v, "-")
	parts := strings.SplitN(num, ".", 3)
	if len(parts) < 2 {
		return "", 0, 0, 0
	}
	var err error
	if major, err = strconv.Atoi(parts[0]); err != nil {
		return "", 0, 0, 0
	}
	if minor, err = strconv.Atoi(parts[1]); err != nil {
		return "", 0, 0, 0
	}
	if len(parts) == 3 {
		digits := strings.TrimRightFunc(parts[2], func(r rune) bool { return r < '0' || r > '9' })
		patch, _ = strconv.Atoi(digits)
	}
	return flavor, major, minor, patch
}

func versionAtLeast(major, minor, patch, wantMajor, wantMinor, wantPatch int) bool {
	if major != wantMajor {
		return major > wantMajor
	}
	if minor != wantMinor {
		return minor > wantMinor
	}
	return patch >= wantPatch
}

func serverResult(s server, configured string) Result {
	r := Result{Name: NameServer}
	switch {
	case s.flavor == "":
		r.Status = Fail
		r.Detail = fmt.Sprintf("the server is %q (%s): not MySQL or MariaDB", s.version, s.comment)
		r.Fix = "point source.host and source.port at a MySQL ≥ 5.7 or MariaDB ≥ 10.5 server"
	case s.flavor == flavorMariaDB && !s.atLeast(10, 5, 0):
		r.Status = Fail
		r.Detail = fmt.Sprintf("MariaDB %s is too old: outbox-relay needs MariaDB ≥ 10.5 (binlog_row_metadata=FULL)", s.version)
		r.Fix = "upgrade the server to MariaDB 10.5 or later (10.11 LTS or 11.4 LTS recommended)"
	case s.flavor == flavorMySQL && !s.atLeast(5, 7, 0):
		r.Status = Fail
		r.Detail = fmt.Sprintf("MySQL %s is too old: outbox-relay needs MySQL ≥ 5.7, and ≥ 8.0.1 for binlog_row_metadata=FULL", s.version)
		r.Fix = "upgrade the server to MySQL 8.0 or later (8.4 LTS recommended)"
	case configured != "auto" && configured != "" && configured != s.flavor:
		r.Status = Fail
		r.Detail = fmt.Sprintf("source.flavor is %s but the server is %s %s", configured, s.flavor, s.version)
		r.Fix = fmt.Sprintf("set source.flavor: auto (or %s) in the config", s.flavor)
	default:
		r.Detail = fmt.Sprintf("%s %s", map[string]string{flavorMySQL: "MySQL", flavorMariaDB: "MariaDB"}[s.flavor], s.version)
	}
	return r
}

// setting is the fix for a dynamic variable: now, and across restarts.
func setting(name, value string) string {
	return fmt.Sprintf("SET GLOBAL %s = '%s' and %s=%s in my.cnf [mysqld]", name, value, name, value)
}

func isOn(v string) bool {
	switch strings.ToUpper(v) {
	case "ON", "1", "TRUE", "YES":
		return true
	}
	return false
}

func logBinResult(vars map[string]string) Result {
	r := Result{Name: NameLogBin, Detail: "binary logging is on"}
	if !isOn(vars["log_bin"]) {
		r.Status = Fail
		r.Detail = fmt.Sprintf("binary logging is off (log_bin = %s): there is no binlog to read", orUnset(vars["log_bin"]))
		r.Fix = "add log_bin=mysql-bin (and a server_id) to my.cnf [mysqld] and restart the server: log_bin cannot be changed at runtime"
	}
	return r
}

func binlogFormatResult(vars map[string]string) Result {
	v := vars["binlog_format"]
	r := Result{Name: NameBinlogFormat, Detail: "ROW"}
	if !strings.EqualFold(v, "ROW") {
		r.Status = Fail
		r.Detail = fmt.Sprintf("binlog_format is %s: statement-based logging carries no row images, so inserts would be missed", orUnset(v))
		r.Fix = setting("binlog_format", "ROW") + " (sessions already open keep their format: reconnect the application)"
	}
	return r
}

func rowImageResult(vars map[string]string) Result {
	v := vars["binlog_row_image"]
	r := Result{Name: NameBinlogRowImage, Detail: "FULL"}
	if v == "" {
		// Before MySQL 5.6 every image was full.
		r.Detail = "not a setting on this server: images are full"
		return r
	}
	if !strings.EqualFold(v, "FULL") {
		r.Status = Fail
		r.Detail = fmt.Sprintf("binlog_row_image is %s: columns not in the row image would arrive empty", v)
		r.Fix = setting("binlog_row_image", "FULL")
	}
	return r
}

func rowMetadataResult(s server) Result {
	v, ok := s.vars["binlog_row_metadata"]
	r := Result{Name: NameBinlogRowMetadata, Detail: "FULL"}
	switch {
	case !ok:
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s does not support binlog_row_metadata (MySQL ≥ 8.0.1 and MariaDB ≥ 10.5 do): without it the binlog has no column names", s.version)
		r.Fix = "upgrade the server to MySQL ≥ 8.0.1 or MariaDB ≥ 10.5, then " + setting("binlog_row_metadata", "FULL")
	case !strings.EqualFold(v, "FULL"):
		r.Status = Fail
		r.Detail = fmt.Sprintf("binlog_row_metadata is %s: the binlog carries no column names, which the relay maps rows with", v)
		r.Fix = setting("binlog_row_metadata", "FULL") + " (supported by MySQL ≥ 8.0.1 and MariaDB ≥ 10.5)"
	}
	return r
}

// gtidModeSteps are the only order in which MySQL lets gtid_mode go to ON.
var gtidModeSteps = []string{"OFF", "OFF_PERMISSIVE", "ON_PERMISSIVE", "ON"}

func gtidModeFix(mode string) string {
	i := 0
	for j, s := range gtidModeSteps {
		if s == mode {
			i = j
		}
	}
	var stmts []string
	if i == 0 {
		stmts = append(stmts, "SET GLOBAL enforce_gtid_consistency = ON")
	}
	for _, s := range gtidModeSteps[i+1:] {
		if s == "ON" {
			stmts = append(stmts, "(wait until SHOW STATUS LIKE 'Ongoing_anonymous_transaction_count' is 0)")
		}
		stmts = append(stmts, "SET GLOBAL gtid_mode = "+s)
	}
	return strings.Join(stmts, "; ") + "; and gtid_mode=ON, enforce_gtid_consistency=ON in my.cnf [mysqld]"
}

// gtidModeResult judges MySQL's gtid_mode. A GTID checkpoint needs
// gtid_mode=ON: the relay resumes it with a GTID dump, which the server
// refuses otherwise.
func gtidModeResult(vars map[string]string, gtidCheckpoint bool) Result {
	mode := strings.ToUpper(vars["gtid_mode"])
	if mode == "" {
		mode = "OFF"
	}
	r := Result{Name: NameGTIDMode, Detail: "ON"}
	switch {
	case mode == "ON":
		return r
	case gtidCheckpoint:
		r.Status = Fail
		r.Detail = fmt.Sprintf("gtid_mode is %s but a sink's checkpoint is a GTID set: the relay cannot resume it", mode)
		r.Fix = gtidModeFix(mode) + " (or, accepting a gap, remove the GTID checkpoints and restart with checkpoint.start: current)"
	case mode == "OFF":
		r.Status = Warn
		r.Detail = "gtid_mode is OFF: the relay falls back to binlog file/position checkpoints, which do not survive a failover to another server"
		r.Fix = gtidModeFix(mode)
	default:
		r.Status = Warn
		r.Detail = fmt.Sprintf("gtid_mode is %s: the relay uses binlog file/position checkpoints until it is ON", mode)
		r.Fix = gtidModeFix(mode)
	}
	return r
}

func enforceGTIDResult(vars map[string]string) Result {
	v := strings.ToUpper(vars["enforce_gtid_consistency"])
	r := Result{Name: NameEnforceGTIDConsistency, Detail: "ON"}
	if v != "ON" {
		r.Status = Warn
		r.Detail = fmt.Sprintf("enforce_gtid_consistency is %s: gtid_mode cannot be ON without it", orUnset(v))
		r.Fix = "SET GLOBAL enforce_gtid_consistency = WARN, check the error log for violations, then " + setting("enforce_gtid_consistency", "ON")
	}
	return r
}

func rowValueOptionsResult(vars map[string]string) Result {
	v := vars["binlog_row_value_options"]
	r := Result{Name: NameBinlogRowValueOptions, Detail: "full JSON values (" + orEmpty(v) + ")"}
	if strings.Contains(strings.ToUpper(v), "PARTIAL_JSON") {
		r.Status = Fail
		r.Detail = "binlog_row_value_options is PARTIAL_JSON: JSON columns are logged as diffs, not values"
		r.Fix = "SET GLOBAL binlog_row_value_options = '' and remove binlog_row_value_options from my.cnf [mysqld]"
	}
	return r
}

func gtidStrictResult(vars map[string]string) Result {
	r := Result{Name: NameGTIDStrictMode, Detail: "ON"}
	if !isOn(vars["gtid_strict_mode"]) {
		r.Status = Warn
		r.Detail = "gtid_strict_mode is OFF: out-of-order GTIDs can make a GTID position ambiguous (recommended ON)"
		r.Fix = setting("gtid_strict_mode", "ON")
	}
	return r
}

func logBinCompressResult(vars map[string]string) Result {
	r := Result{Name: NameLogBinCompress, Detail: "OFF"}
	if isOn(vars["log_bin_compress"]) {
		// The reader decodes MariaDB's compressed row and query events
		// (canal's TestReaderReadsMariaDBCompressedBinlog): not a FAIL.
		r.Status = Warn
		r.Detail = "log_bin_compress is ON: outbox-relay reads MariaDB's compressed binlog events, but other binlog consumers (older replicas, CDC tools) may not"
		r.Fix = "nothing for outbox-relay; if another consumer cannot read them: " + setting("log_bin_compress", "OFF") + ", then FLUSH BINARY LOGS"
	}
	return r
}

// retention is how long binlogs are kept; 0 means they never expire.
func retention(vars map[string]string) (time.Duration, string) {
	if v, ok := vars["binlog_expire_logs_auto_purge"]; ok && !isOn(v) {
		return 0, "binlog_expire_logs_auto_purge = OFF"
	}
	secs, _ := strconv.ParseFloat(vars["binlog_expire_logs_seconds"], 64)
	if secs > 0 {
		return time.Duration(secs) * time.Second, fmt.Sprintf("binlog_expire_logs_seconds = %s", vars["binlog_expire_logs_seconds"])
	}
	days, _ := strconv.ParseFloat(vars["expire_logs_days"], 64)
	if days > 0 {
		return time.Duration(days * float64(24*time.Hour)), fmt.Sprintf("expire_logs_days = %s", vars["expire_logs_days"])
	}
	return 0, "binlog_expire_logs_seconds = 0 and expire_logs_days = 0"
}

func retentionFix(vars map[string]string, min time.Duration) string {
	if _, ok := vars["binlog_expire_logs_seconds"]; ok {
		secs := int64(math.Ceil(min.Seconds()))
		return fmt.Sprintf("SET GLOBAL binlog_expire_logs_seconds = %d and binlog_expire_logs_seconds=%d in my.cnf [mysqld] (longer than the longest sink outage you want to survive)", secs, secs)
	}
	days := int64(math.Ceil(min.Hours() / 24))
	return fmt.Sprintf("SET GLOBAL expire_logs_days = %d and expire_logs_days=%d in my.cnf [mysqld] (longer than the longest sink outage you want to survive)", days, days)
}

// retentionResult compares the binlog retention with --retention-min.
func retentionResult(vars map[string]string, min time.Duration) Result {
	r := Result{Name: NameBinlogRetention}
	keep, src := retention(vars)
	size := vars["max_binlog_total_size"]
	if size == "" {
		size = vars["binlog_space_limit"]
	}
	switch {
	case keep == 0:
		r.Status = Warn
		r.Detail = fmt.Sprintf("binlogs never expire (%s): they fill the disk unless something purges them", src)
		r.Fix = retentionFix(vars, min)
	case keep < min:
		r.Status = Warn
		r.Detail = fmt.Sprintf("binlogs expire after %s (%s), less than --retention-min %s: a sink down longer than that loses its position", human(keep), src, human(min))
		r.Fix = retentionFix(vars, min)
	default:
		r.Detail = fmt.Sprintf("binlogs are kept %s (%s), at least --retention-min %s", human(keep), src, human(min))
	}
	if n, _ := strconv.ParseUint(size, 10, 64); n > 0 {
		r.Status = max(r.Status, Warn)
		r.Detail += fmt.Sprintf("; binlogs are also purged when they exceed max_binlog_total_size = %d bytes, however recent", n)
		if r.Fix == "" {
			r.Fix = "SET GLOBAL max_binlog_total_size = 0 (or large enough for the longest sink outage) and the same in my.cnf [mysqld]"
		}
	}
	return r
}

// human writes a duration in days and hours when it is that long.
func human(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	default:
		return d.String()
	}
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

func orEmpty(v string) string {
	if v == "" {
		return "empty"
	}
	return v
}
