package config

// This file owns what is read: the source section (its servers and TLS)
// and the outbox tables with their column mapping.

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Source is the MySQL or MariaDB server whose binlog is read: one (host,
// port), or an ordered list (servers) to fail over between.
type Source struct {
	// Host of the server. Default 127.0.0.1 (when servers is not set).
	Host string `yaml:"host" default:"127.0.0.1"`
	// Port of the server. Default 3306 (when servers is not set).
	Port int `yaml:"port" default:"3306"`
	// Servers are several servers with one history (a primary and its
	// replicas, replicating by GTID), as "host:port" (port default 3306), in
	// order of preference; user, password, TLS and the rest apply to each.
	// Each sink reads the first one that passes the binlog checks and can
	// serve its checkpoint, and moves to the next usable one when its stream
	// has failed for failover_after. Set either host/port or servers.
	Servers []string `yaml:"servers"`
	// FailoverAfter is how long a stream may fail, without reading a
	// transaction, before its sink looks for another of servers. Default 10s.
	FailoverAfter time.Duration `yaml:"failover_after" default:"10s"`
	// User needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the
	// outbox tables. Default root.
	User string `yaml:"user" default:"root"`
	// Password; write ${ENV_VAR} to take it from the environment.
	Password Secret `yaml:"password" example:"${RELAY_DB_PASSWORD}"`
	// Flavor is auto (detected from the server), mysql or mariadb. Default auto.
	Flavor string `yaml:"flavor" default:"auto"`
	// ServerID is the replica id of the first sink's stream; sink i uses
	// ServerID+i, and the catch-up streams of webhook sinks the ids after
	// those (see Config.ReplicaIDs). None may collide with the server's own
	// id or any replica's. Default 4041.
	ServerID uint32 `yaml:"server_id" default:"4041"`
	// Heartbeat is the server heartbeat period on an idle binlog. Default 5s.
	Heartbeat time.Duration `yaml:"heartbeat" default:"5s"`
	// ReadTimeout ends a connection that is silent this long (or up to a
	// sixteenth of it later, at most 1s). Default 3 × heartbeat.
	ReadTimeout time.Duration `yaml:"read_timeout" derived:"3 × source.heartbeat"`
	// MaxReconnectBackoff caps the wait between reconnects. Default 30s (delivery.max_retry_backoff's default).
	MaxReconnectBackoff time.Duration `yaml:"max_reconnect_backoff" default:"30s"`
	// TLS to the server. Default off.
	TLS TLS `yaml:"tls"`
}

// Addr is one source server.
type Addr struct {
	Host string
	Port int
}

func (a Addr) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// Addrs lists the source servers in order of preference: servers, or the
// one host/port.
func (s Source) Addrs() []Addr {
	if len(s.Servers) == 0 {
		return []Addr{{s.Host, s.Port}}
	}
	out := make([]Addr, 0, len(s.Servers))
	for _, a := range s.Servers {
		h, p, _ := SplitHostPort(a) // checked by Validate
		out = append(out, Addr{h, p})
	}
	return out
}

// SplitHostPort parses "host:port" or "host" (port 3306), IPv6 in brackets.
func SplitHostPort(a string) (string, int, error) {
	host, port := a, "3306"
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
	} else if strings.Contains(strings.Trim(a, "[]"), ":") && !strings.HasPrefix(a, "[") {
		return "", 0, fmt.Errorf("%q: write host:port (an IPv6 address in brackets: [::1]:3306)", a)
	}
	host = strings.Trim(host, "[]")
	n, err := strconv.Atoi(port)
	if host == "" || strings.ContainsAny(host, "@/ ") || err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q is not host:port", a)
	}
	return host, n, nil
}

// TLS settings for the connections to the source server: the queries and
// the binlog stream alike.
type TLS struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the server's certificate.
	// Default: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name checked in the server's certificate. Default: source.host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. Default false; for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Table is one outbox table.
type Table struct {
	// Name is "schema.table". Required.
	Name string `yaml:"name" example:"shop.outbox"`
	// Columns map event fields to columns. Defaults follow Debezium's outbox
	// event router: id, aggregatetype, aggregateid, type, payload. Write "-"
	// for aggregate_type or type when the table has no such column.
	Columns Columns `yaml:"columns"`
	// Headers are extra columns delivered as headers. Default none.
	Headers []string `yaml:"headers"`
	// SwitchOver makes the relay claim each row of this table before it
	// sends it, as a polling worker still running on the table does, so that
	// the two together send each row once (docs/replay.md, "Switch-over from
	// a polling worker"). Needs UPDATE on the table. Remove it once the
	// poller is gone. Default none (no claim).
	SwitchOver *SwitchOver `yaml:"switch_over"`
}

// SwitchOver is the status column a polling worker claims rows by, and the
// values the relay claims them with.
type SwitchOver struct {
	// StatusColumn is the poller's status column. Default status.
	StatusColumn string `yaml:"status_column" default:"status"`
	// Pending is the status of a row no one has claimed. Default pending.
	Pending string `yaml:"pending" default:"pending"`
	// Claimed is the status the relay sets on the rows it claims: a value
	// the column accepts (add it to an ENUM) and the poller never sets, so
	// that after a crash the relay knows the rows it claimed. Default
	// relayed.
	Claimed string `yaml:"claimed" default:"relayed"`
}

// Columns maps event fields to column names.
type Columns struct {
	// ID is the event id's column; a BINARY(16) is rendered as a UUID
	// string. Default id.
	ID string `yaml:"id" default:"id"`
	// AggregateType is the aggregate type's column, "-" when the table has
	// none. Default aggregatetype.
	AggregateType string `yaml:"aggregate_type" default:"aggregatetype"`
	// AggregateID is the aggregate id's column: the ordering key (the
	// Kafka message key). Default aggregateid.
	AggregateID string `yaml:"aggregate_id" default:"aggregateid"`
	// Type is the event type's column, "-" when the table has none.
	// Default type.
	Type string `yaml:"type" default:"type"`
	// Payload is the payload's column, sent as the exact bytes stored.
	// Default payload.
	Payload string `yaml:"payload" default:"payload"`
	// CreatedAt is the column prune matches rows by: a TIMESTAMP or
	// DATETIME set by the server (DEFAULT CURRENT_TIMESTAMP), never by the
	// application. Only prune reads it. Default created_at.
	CreatedAt string `yaml:"created_at" default:"created_at"`
	// TraceParent is the column holding the W3C traceparent of the request
	// that wrote the row (its OpenTelemetry context), carried by every sink
	// and the parent of the relay's own span (see docs/tracing.md); or
	// "$.field" (or "$.a.b") for a string field of the payload's JSON. A
	// malformed value is ignored (logged once, counted in
	// outbox_relay_traceparent_malformed_total). Default "" (none).
	TraceParent string `yaml:"traceparent"`
	// TraceState is the column (or "$.field" of the payload) holding the
	// W3C tracestate that goes with traceparent. Default "" (none).
	TraceState string `yaml:"tracestate"`
}

// SchemaTable splits a table name.
func (t Table) SchemaTable() (string, string) {
	schema, name, _ := strings.Cut(t.Name, ".")
	return schema, name
}

// Column returns a mapped column name, with "-" meaning not mapped.
func Column(v string) string {
	if v == "-" {
		return ""
	}
	return v
}

// PayloadPath returns the field path of a column mapping "$.a.b" (a field
// inside the payload's JSON), or nil when col names a column.
func PayloadPath(col string) []string {
	p, ok := strings.CutPrefix(col, "$.")
	if !ok || p == "" {
		return nil
	}
	return strings.Split(p, ".")
}
