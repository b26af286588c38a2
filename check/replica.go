package check

import (
	"context"
	"database/sql"
	"strings"

	"github.com/outbox-relay/outbox-relay/canal"
)

// replicaUpdatesResult checks that a replica writes what it replicates to
// its own binlog (log_slave_updates): a relay pointed at a read replica
// without it sees none of the outbox rows committed on the primary.
func replicaUpdatesResult(ctx context.Context, db *sql.DB, s server) Result {
	r := Result{Name: NameReplicaUpdates}
	name := "log_slave_updates"
	v, ok := s.vars[name]
	if !ok {
		name = "log_replica_updates"
		v = s.vars[name]
	}
	if isOn(v) {
		r.Detail = name + " is ON: replicated transactions are in this server's binlog"
		return r
	}
	primary, known := replicaOf(ctx, db)
	switch {
	case known && primary == "":
		r.Detail = "not a replica (" + name + " is OFF, which is fine on a primary)"
	case known:
		r.Status = Fail
		r.Detail = "this server replicates from " + primary + " but " + name + " is OFF: what it replicates is not in its binlog, so the relay sees none of the outbox rows committed on the primary"
		r.Fix = name + "=ON in my.cnf [mysqld] and restart the server (it is not dynamic), or point source at the primary"
	default:
		r.Status = Warn
		r.Detail = name + " is OFF and the relay's user cannot tell whether this server is a replica"
		r.Fix = "if it is a replica: " + name + "=ON in my.cnf [mysqld] and restart; to let check tell, GRANT REPLICATION CLIENT (MariaDB: SLAVE MONITOR) to the relay's user"
	}
	return r
}

// replicaOf returns the primary a server replicates from ("" when it does
// not), and whether that could be read at all.
func replicaOf(ctx context.Context, db *sql.DB) (string, bool) {
	for _, q := range []string{"SHOW REPLICA STATUS", "SHOW SLAVE STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		host, port := "", ""
		found := false
		for rows.Next() {
			found = true
			vals, err := canal.ScanRow(rows)
			if err != nil {
				break
			}
			for i, c := range cols {
				switch strings.ToLower(c) {
				case "master_host", "source_host":
					host = vals[i]
				case "master_port", "source_port":
					port = vals[i]
				}
			}
		}
		rows.Close()
		if !found {
			return "", true
		}
		if host == "" {
			host = "a primary"
		} else if port != "" {
			host += ":" + port
		}
		return host, true
	}
	// MariaDB 10.5+ wants SLAVE MONITOR for SHOW SLAVE STATUS, but tells
	// anyone whether its replication threads run and which GTIDs it has
	// replicated: running means a replica; neither means none.
	var name, running, slavePos string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Slave_running'").Scan(&name, &running); err != nil {
		return "", false
	}
	if isOn(running) {
		return "a primary", true
	}
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_slave_pos").Scan(&slavePos); err == nil && slavePos == "" {
		return "", true
	}
	return "", false // a stopped replica, perhaps
}
