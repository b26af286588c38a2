package canal

// This file owns the text of GTIDs and GTID sets the reader writes once per
// transaction (the event's Source.GTID, the position's GTIDSet): the same
// bytes go-mysql's String methods give, without fmt.

import (
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// mariadbGTID is g as MariaDB writes it, "domain-server-seq", and "" for
// the all-zero GTID: what (*mysql.MariadbGTID).String returns.
func mariadbGTID(g *mysql.MariadbGTID) string {
	if g.DomainID == 0 && g.ServerID == 0 && g.SequenceNumber == 0 {
		return ""
	}
	var b [10 + 1 + 10 + 1 + 20]byte // two uint32s, a uint64 and the dashes
	return string(appendMariadbGTID(b[:0], g))
}

func appendMariadbGTID(b []byte, g *mysql.MariadbGTID) []byte {
	b = strconv.AppendUint(b, uint64(g.DomainID), 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(g.ServerID), 10)
	b = append(b, '-')
	return strconv.AppendUint(b, g.SequenceNumber, 10)
}

// gtidSet is set's text, what set.String() returns. A MariaDB position of
// one domain (the common case: one primary writing) is formatted directly;
// one of several domains keeps go-mysql's text (its domains' GTIDs sorted
// as strings, so 10-… before 2-…), and a MySQL set is go-mysql's.
func gtidSet(set mysql.GTIDSet) string {
	if s, ok := set.(*mysql.MariadbGTIDSet); ok && len(s.Sets) == 1 {
		for _, g := range s.Sets {
			return mariadbGTID(g)
		}
	}
	return set.String()
}

// mysqlGTID is a MySQL GTID without a tag as MySQL writes it, "uuid:gno".
func mysqlGTID(u uuid.UUID, gno int64) string {
	var b [36 + 1 + 20]byte // the UUID, the colon, an int64
	return string(strconv.AppendInt(append(append(b[:0], u.String()...), ':'), gno, 10))
}
