package config

// This file owns validation: Config.Validate, which names the field and the
// bad value in each message, and what it checks with (checkpoint.start,
// identifiers, sourceCredentials).

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// identRe is a column name prune can use unquoted of any risk.
var identRe = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`)

// sourceCredentials is the error for a source address written with
// credentials ("relay:pw@db:3306"), which would be echoed in errors and
// connect logs. It never quotes the address.
const sourceCredentials = `holds an "@": credentials do not belong in a server address (they would be logged); write host:port only, and set source.user and source.password (from the environment: password: ${SOURCE_PASSWORD})`

// Validate reports the first problems found, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Source.Servers) > 0 {
		if c.Source.Host != "" || c.Source.Port != 0 {
			bad("source: set either host/port (one server) or servers (a list), not both")
		}
		seen := map[string]bool{}
		for i, a := range c.Source.Servers {
			if strings.Contains(a, "@") {
				bad("source.servers[%d]: %s", i, sourceCredentials)
				continue
			}
			host, port, err := SplitHostPort(a)
			switch {
			case err != nil:
				bad("source.servers[%d]: %v", i, err)
			case seen[net.JoinHostPort(host, strconv.Itoa(port))]:
				bad("source.servers[%d]: %s is listed twice", i, a)
			}
			seen[net.JoinHostPort(host, strconv.Itoa(port))] = true
		}
	} else if strings.Contains(c.Source.Host, "@") {
		bad("source.host: %s", sourceCredentials)
	} else if c.Source.Port <= 0 || c.Source.Port > 65535 {
		bad("source.port: %d is not a TCP port", c.Source.Port)
	}
	if !oneOf(c.Source.Flavor, "auto", "mysql", "mariadb") {
		bad("source.flavor: %q is not one of auto, mysql, mariadb", c.Source.Flavor)
	}
	if t := c.Source.TLS; !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		bad("source.tls.enabled: false, but other source.tls fields are set; set source.tls.enabled: true to use them")
	}
	if t := c.Source.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		bad("source.tls: cert_file and key_file must be set together")
	}
	if c.Source.ReadTimeout <= c.Source.Heartbeat {
		bad("source.read_timeout: %s must be longer than source.heartbeat (%s), or a quiet server looks dead", c.Source.ReadTimeout, c.Source.Heartbeat)
	}
	if len(c.Tables) == 0 {
		bad("tables: no outbox table configured: add one, e.g. `tables: [{name: shop.outbox}]`")
	}
	seen := map[string]bool{}
	for i, t := range c.Tables {
		parts := strings.Split(t.Name, ".")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			bad("tables[%d].name: %q must be schema.table", i, t.Name)
		}
		if seen[t.Name] {
			bad("tables[%d].name: %q is listed twice", i, t.Name)
		}
		seen[t.Name] = true
		for field, v := range map[string]string{"id": t.Columns.ID, "aggregate_id": t.Columns.AggregateID, "payload": t.Columns.Payload} {
			if v == "-" {
				bad("tables[%d].columns.%s: this field is required and cannot be \"-\"", i, field)
			}
		}
		if so := t.SwitchOver; so != nil {
			if !identRe.MatchString(so.StatusColumn) {
				bad("tables[%d].switch_over.status_column: %q: use letters, digits, _ and $ only", i, so.StatusColumn)
			}
			if !identRe.MatchString(t.Columns.ID) {
				bad("tables[%d].switch_over: the id column %q must be a plain column name (letters, digits, _ and $): the claim selects rows by it", i, t.Columns.ID)
			}
			if so.Pending == "" || so.Claimed == "" || so.Pending == so.Claimed {
				bad("tables[%d].switch_over: pending (%q) and claimed (%q) must be set and differ: claimed is the status only the relay sets", i, so.Pending, so.Claimed)
			}
		}
	}
	if !oneOf(c.Checkpoint.Store, "file", "mysql") {
		bad("checkpoint.store: %q is not one of file, mysql", c.Checkpoint.Store)
	}
	if c.Checkpoint.Store == "mysql" && c.Checkpoint.DSN == "" {
		bad("checkpoint.dsn: required with checkpoint.store: mysql (user:${PASSWORD}@tcp(host:3306)/db)")
	}
	if c.Checkpoint.DSN != "" {
		if err := CheckDSN(c.Checkpoint.DSN.Reveal()); err != nil {
			errs = append(errs, err)
		}
	}
	for field, name := range map[string]string{"checkpoint.table": c.Checkpoint.Table, "dead_letter.table": c.DeadLetter.Table, "attempts.table": c.Attempts.Table} {
		if !ValidTableName(name) {
			bad("%s: %q: use 1 to 64 letters, digits, _ and $", field, name)
		}
	}
	if c.Checkpoint.MinInterval < 0 {
		bad("checkpoint.min_interval: %s is negative; leave it out for the default %s", c.Checkpoint.MinInterval, DefaultOf(c.Checkpoint, "min_interval"))
	}
	if _, err := c.StartGTID(); err != nil {
		bad("checkpoint.start: %v", err)
	}
	if lt := c.Checkpoint.LockTimeout; lt < 2*time.Second || lt%time.Second != 0 {
		bad("checkpoint.lock_timeout: %s: use whole seconds, at least 2s", lt)
	}
	if !oneOf(c.DeadLetter.Store, "file", "mysql", "none") {
		bad("dead_letter.store: %q is not one of file, mysql, none", c.DeadLetter.Store)
	}
	if c.DeadLetter.Store == "mysql" && c.Checkpoint.DSN == "" {
		bad("dead_letter.store: mysql keeps dead letters in the checkpoint database: set checkpoint.dsn")
	}
	if c.HTTP.PProf && c.HTTP.Listen == "" {
		bad("http.pprof: true needs http.listen (the address the profiles are served on)")
	}
	if c.Delivery.Linger < 0 {
		bad("delivery.linger: %s is negative; 0 (the default) sends what is queued without waiting", c.Delivery.Linger)
	}
	if c.Delivery.BatchSize > c.Delivery.MaxInFlight {
		bad("delivery.batch_size: %d is larger than delivery.max_in_flight (%d)", c.Delivery.BatchSize, c.Delivery.MaxInFlight)
	}
	if len(c.Sinks) == 0 {
		bad("sinks: no sink configured: add one, e.g. `sinks: [{name: out, type: stdout}]`")
	}
	names := map[string]bool{}
	for i, s := range c.Sinks {
		if s.Name == "" || strings.ContainsAny(s.Name, "/ \t") {
			bad("sinks[%d].name: %q must be set and have no '/' or spaces", i, s.Name)
		}
		if names[s.Name] {
			bad("sinks[%d].name: %q is used twice; each sink needs its own name (it keys its checkpoint)", i, s.Name)
		}
		names[s.Name] = true
		s.validate(i, bad)
	}
	c.Console.validate(bad)
	if rp := c.Replay; rp.MaxRunning < 0 || rp.MaxRunning > 64 {
		bad("replay.max_running: %d is not between 0 and 64", rp.MaxRunning)
	}
	if c.Replay.Poll < 100*time.Millisecond {
		bad("replay.poll: %s: use at least 100ms", c.Replay.Poll)
	}
	if c.Replay.MaxJobsPerTenant < 1 {
		bad("replay.max_jobs_per_tenant: %d: use at least 1", c.Replay.MaxJobsPerTenant)
	}
	if c.Replay.MaxInFlight < 1 {
		bad("replay.max_in_flight: %d: use at least 1", c.Replay.MaxInFlight)
	}
	if at := c.Attempts; at.Enabled {
		if at.MaxAge < time.Minute {
			bad("attempts.max_age: %s: use at least 1m (leave it out for the default %s)", at.MaxAge, DefaultOf(at, "max_age"))
		}
		if at.MaxRows < 0 {
			bad("attempts.max_rows: %d is negative; use 0 for no cap but max_age", at.MaxRows)
		}
		if at.Queue < 1 || at.BatchSize < 1 {
			bad("attempts.queue (%d) and attempts.batch_size (%d): use at least 1 each", at.Queue, at.BatchSize)
		}
		if at.Interval < time.Millisecond {
			bad("attempts.interval: %s: use at least 1ms (leave it out for the default %s)", at.Interval, DefaultOf(at, "interval"))
		}
	}
	pr := c.Prune
	if pr.Schedule < 0 || (pr.Schedule > 0 && pr.Schedule < time.Minute) {
		bad("prune.schedule: %s: use at least 1m, or 0 (never; run `outbox-relay prune` yourself)", pr.Schedule)
	}
	if pr.OlderThan < 0 {
		bad("prune.older_than: %s must not be negative", pr.OlderThan)
	}
	if pr.SafetyMargin < time.Second {
		bad("prune.safety_margin: %s: use at least 1s (binlog commit times have whole seconds); it must exceed your longest transaction", pr.SafetyMargin)
	}
	if pr.BatchSize < 1 || pr.BatchSize > 10000 {
		bad("prune.batch_size: %d is not between 1 and 10000", pr.BatchSize)
	}
	if pr.Pause < 0 || pr.Rate < 0 {
		bad("prune.pause and prune.rate must not be negative (%s, %d)", pr.Pause, pr.Rate)
	}
	if pr.PartitionsAhead != nil && (*pr.PartitionsAhead < 0 || *pr.PartitionsAhead > 1000) {
		bad("prune.partitions_ahead: %d is not between 0 and 1000", *pr.PartitionsAhead)
	}
	if lw := pr.LockWaitTimeout; lw < time.Second || lw%time.Second != 0 {
		bad("prune.lock_wait_timeout: %s: use whole seconds, at least 1s", lw)
	}
	for i, t := range c.Tables {
		if cc := t.Columns.CreatedAt; cc != "" && !identRe.MatchString(cc) {
			bad("tables[%d].columns.created_at: %q: use letters, digits, _ and $ only", i, cc)
		}
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		bad("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		bad("log.format: %q is not one of text, json", c.Log.Format)
	}
	return errors.Join(errs...)
}

// StartGTID returns the explicit GTID set of checkpoint.start, or "" for
// current and earliest.
func (c *Config) StartGTID() (string, error) {
	switch s := c.Checkpoint.Start; {
	case s == "current" || s == "earliest":
		return "", nil
	case strings.HasPrefix(s, "gtid:") && len(s) > len("gtid:"):
		return strings.TrimPrefix(s, "gtid:"), nil
	default:
		return "", fmt.Errorf("%q is not current, earliest or gtid:<set>", s)
	}
}

func oneOf(v string, options ...string) bool {
	for _, o := range options {
		if v == o {
			return true
		}
	}
	return false
}
