package source

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// Replica is one row of the server's replica list.
type Replica struct {
	ID   uint32
	Host string // the host the replica reported (report_host; a relay reports its hostname)
}

// ListReplicas returns the replicas registered with the server: SHOW SLAVE
// HOSTS, or SHOW REPLICAS where that is gone (MySQL 8.4). MariaDB needs
// REPLICATION MASTER ADMIN for it, MySQL REPLICATION SLAVE.
func ListReplicas(ctx context.Context, db *sql.DB) ([]Replica, error) {
	reps, err := ListReplicasWith(ctx, db, "SHOW SLAVE HOSTS")
	if err != nil {
		if r2, err2 := ListReplicasWith(ctx, db, "SHOW REPLICAS"); err2 == nil {
			return r2, nil
		}
	}
	return reps, err
}

// ListReplicasWith runs q, SHOW SLAVE HOSTS or SHOW REPLICAS.
func ListReplicasWith(ctx context.Context, db *sql.DB, q string) ([]Replica, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	idCol, hostCol := -1, -1
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "server_id":
			idCol = i
		case "host":
			hostCol = i
		}
	}
	if idCol < 0 {
		return nil, fmt.Errorf("%s has no Server_id column", q)
	}
	var out []Replica
	for rows.Next() {
		vals, err := ScanRow(rows)
		if err != nil {
			return nil, err
		}
		id, _ := strconv.ParseUint(vals[idCol], 10, 32)
		x := Replica{ID: uint32(id)}
		if hostCol >= 0 {
			x.Host = vals[hostCol]
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
