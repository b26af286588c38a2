package check

import (
	"context"
	"database/sql"

	"github.com/outbox-relay/outbox-relay/source"
)

// replicaUpdatesResult checks that a replica writes what it replicates to
// its own binlog (log_slave_updates): a relay pointed at a read replica
// without it sees none of the outbox rows committed on the primary.
func replicaUpdatesResult(ctx context.Context, db *sql.DB, s server) Result {
	r := Result{Name: NameReplicaUpdates}
	name := "log_slave_updates"
	v, ok := s.vars["log_slave_updates"]
	if !ok {
		name = "log_replica_updates"
		v = s.vars["log_replica_updates"]
	}
	if isOn(v) {
		r.Detail = name + " is ON: replicated transactions are in this server's binlog"
		return r
	}
	primary, known := source.ReplicaOf(ctx, db)
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
