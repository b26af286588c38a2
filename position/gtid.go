package position

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// MariaDBPositions parses a GTID position: one GTID per domain (the last
// listed wins when a domain repeats, as in a GTID list).
func MariaDBPositions(s string) (map[uint32]mysql.MariadbGTID, error) {
	out := map[uint32]mysql.MariadbGTID{}
	err := eachMariaDBGTID(s, func(g *mysql.MariadbGTID) {
		if old, ok := out[g.DomainID]; !ok || g.SequenceNumber >= old.SequenceNumber {
			out[g.DomainID] = *g
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachMariaDBGTID parses a comma-separated list of MariaDB GTIDs (a GTID
// position, gtid_binlog_state; line breaks ignored) and calls each with
// every GTID in the order listed. It stops at the first that does not parse.
func eachMariaDBGTID(s string, each func(g *mysql.MariadbGTID)) error {
	for _, part := range strings.Split(strings.ReplaceAll(s, "\n", ""), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return err
		}
		each(g)
	}
	return nil
}

// Set is a parsed checkpoint GTID set: a MySQL GTID set ("uuid:1-5,...") or
// a MariaDB GTID position ("0-1-5,1-2-9"), told apart by their text.
type Set struct {
	mysql *mysql.MysqlGTIDSet
	maria map[uint32]mysql.MariadbGTID
}

// Parse reads a checkpoint's GTID set; "" is an error (there is nothing to
// compare with).
func Parse(s string) (*Set, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\n", ""))
	if s == "" {
		return nil, fmt.Errorf("empty GTID set")
	}
	if strings.Contains(s, ":") {
		set, err := mysql.ParseMysqlGTIDSet(s)
		if err != nil {
			return nil, fmt.Errorf("parse GTID set %q: %w", s, err)
		}
		return &Set{mysql: set.(*mysql.MysqlGTIDSet)}, nil
	}
	m, err := MariaDBPositions(s)
	if err != nil {
		return nil, fmt.Errorf("parse GTID position %q: %w", s, err)
	}
	return &Set{maria: m}, nil
}

// Contains reports whether the set holds transaction g ("uuid:n" for MySQL,
// "domain-server-seq" for MariaDB): for MariaDB, whether g's domain is at or
// past g's sequence number. A GTID of the other flavor, or one that does not
// parse, is an error.
func (s *Set) Contains(g string) (bool, error) {
	g = strings.TrimSpace(g)
	if s.mysql != nil {
		if !strings.Contains(g, ":") {
			return false, fmt.Errorf("GTID %q is not a MySQL GTID (the checkpoint is a MySQL GTID set)", g)
		}
		one, err := mysql.ParseMysqlGTIDSet(g)
		if err != nil {
			return false, fmt.Errorf("parse GTID %q: %w", g, err)
		}
		return s.mysql.Contain(one), nil
	}
	one, err := mysql.ParseMariadbGTID(g)
	if err != nil || g == "" {
		return false, fmt.Errorf("GTID %q is not a MariaDB GTID (the checkpoint is a MariaDB GTID position)", g)
	}
	have, ok := s.maria[one.DomainID]
	return ok && one.SequenceNumber <= have.SequenceNumber, nil
}
